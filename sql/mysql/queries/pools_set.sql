-- MySQL: ON DUPLICATE KEY UPDATE for ON CONFLICT. VALUES(col) is deprecated in MySQL 8.0.20+
-- (which prefers a row alias, INSERT ... AS new) but is what MariaDB understands; both accept it.
INSERT INTO pool (name, slots, include_deferred, description, preempt_margin)
VALUES (:name, :slots, :include_deferred, :description, :preempt_margin)
ON DUPLICATE KEY UPDATE description = COALESCE(VALUES(description), description), slots = VALUES(slots),
    include_deferred = VALUES(include_deferred), preempt_margin = VALUES(preempt_margin)
