-- Wake-ups (engine/wakeup.py): the scheduler LISTENs here; finish_ti, fire_trigger and trigger_dag notify.
LISTEN engine_scheduler
