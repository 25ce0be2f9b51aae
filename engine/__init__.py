"""A workflow scheduler whose decisions are made by versioned stored functions."""
from engine.dag import DAG, BashTask, PythonTask
from engine.exceptions import Defer, SkipTask
from engine.triggers import BaseTrigger, DateTimeTrigger, EventTrigger, FileTrigger, TimeDeltaTrigger

__all__ = ["DAG", "BashTask", "PythonTask", "Defer", "SkipTask", "BaseTrigger", "DateTimeTrigger",
           "EventTrigger", "FileTrigger", "TimeDeltaTrigger"]
__version__ = "0.1.0"
