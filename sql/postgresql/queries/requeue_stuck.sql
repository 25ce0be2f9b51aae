SELECT * FROM requeue_stuck_v2(:timeout, :max_requeues, :now)
