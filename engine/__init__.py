"""A workflow scheduler whose decisions are made by versioned stored functions.

The names below are imported on first use (PEP 562), so a command that needs none of them
(`engine tick` from cron, the services) does not pay for DAG authoring, cron parsing and
asyncio at start-up; `from engine import DAG` works as before.
"""
from __future__ import annotations

import importlib

_EXPORTS = {"DAG": "engine.dag", "BashTask": "engine.dag", "PythonTask": "engine.dag",
            "Defer": "engine.exceptions", "SkipTask": "engine.exceptions",
            "BaseTrigger": "engine.triggers", "DateTimeTrigger": "engine.triggers",
            "EventTrigger": "engine.triggers", "FileTrigger": "engine.triggers",
            "TimeDeltaTrigger": "engine.triggers", "TriggerEvent": "engine.triggers"}

__all__ = list(_EXPORTS)
__version__ = "0.1.0"


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted(list(globals()) + __all__)
