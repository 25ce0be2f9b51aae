class EngineError(Exception):
    """A user-facing error: one line naming the thing and the fix."""
