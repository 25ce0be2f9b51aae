"""Exceptions task code may raise to steer how a try ends."""


class SkipTask(Exception):
    """Raised by a PythonTask callable: the try ends as `skipped` (the runner exits with 99)."""
