"""The engine's own commands (run, events, project, stats); each module has ``configure(parser)``."""
