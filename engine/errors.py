"""Errors that reach the user as one clear line instead of a traceback."""


class UserError(Exception):
    """Bad input or a bad request: the CLI prints the message on one line and exits with status 2."""
