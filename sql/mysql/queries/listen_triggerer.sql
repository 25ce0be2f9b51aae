-- MySQL/MariaDB have no LISTEN/NOTIFY: engine/wakeup.py never sends this statement here (the
-- services poll); the file exists so that both dialects name the same statements.
DO 0
