"""A workflow scheduler whose decisions are made by versioned stored functions."""
from engine.dag import DAG, BashTask, PythonTask

__all__ = ["DAG", "BashTask", "PythonTask"]
__version__ = "0.1.0"
