"""dialogsim: an event-sourced dialogue simulation engine (the distribution's root package)."""

__version__ = "0.1.0"
