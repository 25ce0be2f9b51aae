-- Wake-ups (engine/wakeup.py): workers LISTEN here; the scheduler's queue_tis step and fire_trigger notify.
LISTEN engine_queued
