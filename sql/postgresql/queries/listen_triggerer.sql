-- Wake-ups (engine/wakeup.py): triggerers LISTEN here; defer_ti notifies.
LISTEN engine_triggerer
