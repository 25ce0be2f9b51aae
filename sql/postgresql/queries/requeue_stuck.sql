SELECT * FROM requeue_stuck_v1(:timeout, :max_requeues, :now)
