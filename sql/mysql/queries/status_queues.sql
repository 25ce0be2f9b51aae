SELECT pool, queue, scheduled, queued, running, deferred, up_for_retry FROM queue_depth ORDER BY pool, queue
