-- Wake-ups (engine/wakeup.py): sent by the scheduler in the transaction of a queue_tis call that
-- queued something; delivered at commit to every listening worker.
SELECT pg_notify('engine_queued', '');
