-- analyze_stale_v1(fraction, min_rows): keep the optimizer's statistics of the engine's busiest
-- tables in step with their data (issue 11 item 6: a surge of new runs planned with statistics
-- of the table as it was). The scheduler calls it in every pass, before schedule_tis. InnoDB
-- recalculates a table's persistent statistics by itself once 10% of its rows changed
-- (innodb_stats_auto_recalc), in a background thread, some seconds later; this does the same
-- at once, and at `fraction`: each of task_instance, dag_run, task_instance_history and
-- trigger whose rows modified since the last recalculation (MODIFIED_COUNTER of
-- information_schema.INNODB_SYS_TABLESTATS on MariaDB, INNODB_TABLESTATS on MySQL 8) reach
-- `fraction` of the rows InnoDB believes it has (NUM_ROWS) and at least `min_rows` gets an
-- ANALYZE TABLE. Returns (first result set) one row per table analyzed: (table_name,
-- rows_changed, rows_estimated before); none when nothing is stale. Not time-dependent: no now.
--
-- LOCK: the row scheduler_lock('analyze_stale'), FOR UPDATE SKIP LOCKED, held to commit: one
-- scheduler analyzes at a time; another returns at once with no row (never waits, never
-- "busy"). ANALYZE TABLE reads a sample of index pages (innodb_stats_persistent_sample_pages)
-- and does not block the table's reads and writes.
-- INVARIANT: data is never changed; only the optimizer's statistics of these four tables.
-- CALLERS MAY ASSUME: one read of InnoDB's in-memory counters when nothing is stale. The result
-- sets of the ANALYZE TABLE statements follow the first one; the driver discards them.
CREATE PROCEDURE analyze_stale_v1(IN p_fraction DOUBLE, IN p_min_rows BIGINT)
BEGIN
    DECLARE v_locked INT DEFAULT 0;
    DECLARE v_done INT DEFAULT 0;
    DECLARE v_table VARCHAR(64);
    DECLARE v_view VARCHAR(64);
    DECLARE c_found CURSOR FOR SELECT f.table_name FROM analyze_stale_v1_found f ORDER BY f.table_name;
    DECLARE CONTINUE HANDLER FOR NOT FOUND SET v_done = 1;

    CREATE TEMPORARY TABLE IF NOT EXISTS analyze_stale_v1_found (
        table_name VARCHAR(64) PRIMARY KEY, rows_changed BIGINT, rows_estimated BIGINT);
    DELETE FROM analyze_stale_v1_found;
    SELECT COUNT(*) INTO v_locked FROM scheduler_lock l WHERE l.name = 'analyze_stale' FOR UPDATE SKIP LOCKED;
    IF v_locked = 1 THEN
        SELECT IF(COUNT(*) > 0, 'INNODB_SYS_TABLESTATS', 'INNODB_TABLESTATS') INTO v_view
        FROM information_schema.TABLES
        WHERE TABLE_SCHEMA = 'information_schema' AND TABLE_NAME = 'INNODB_SYS_TABLESTATS';
        SET @analyze_stale_v1_sql = CONCAT(
            'INSERT INTO analyze_stale_v1_found (table_name, rows_changed, rows_estimated) ',
            'SELECT SUBSTRING_INDEX(s.NAME, ''/'', -1), s.MODIFIED_COUNTER, s.NUM_ROWS ',
            'FROM information_schema.', v_view, ' s ',
            'WHERE s.NAME IN (CONCAT(DATABASE(), ''/task_instance''), CONCAT(DATABASE(), ''/dag_run''), ',
            'CONCAT(DATABASE(), ''/task_instance_history''), CONCAT(DATABASE(), ''/trigger'')) ',
            'AND s.MODIFIED_COUNTER >= GREATEST(?, ? * s.NUM_ROWS)');
        SET @analyze_stale_v1_min = COALESCE(p_min_rows, 1000);
        SET @analyze_stale_v1_fraction = GREATEST(COALESCE(p_fraction, 0.1), 0);
        PREPARE analyze_stale_v1_find FROM @analyze_stale_v1_sql;
        EXECUTE analyze_stale_v1_find USING @analyze_stale_v1_min, @analyze_stale_v1_fraction;
        DEALLOCATE PREPARE analyze_stale_v1_find;
    END IF;
    SELECT f.table_name, f.rows_changed, f.rows_estimated FROM analyze_stale_v1_found f ORDER BY f.table_name;
    OPEN c_found;
    analyze_each: LOOP
        FETCH c_found INTO v_table;
        IF v_done = 1 THEN
            LEAVE analyze_each;
        END IF;
        SET @analyze_stale_v1_sql = CONCAT('ANALYZE TABLE `', v_table, '`');
        PREPARE analyze_stale_v1_one FROM @analyze_stale_v1_sql;
        EXECUTE analyze_stale_v1_one;
        DEALLOCATE PREPARE analyze_stale_v1_one;
    END LOOP;
    CLOSE c_found;
END
