-- queue_tis_v12(max_tis, job_id, now, page_factor): queue_tis_v11, which it calls (read
-- sql/postgresql/queue_tis_v11.sql for the contract), with its setting engine.skip_min checked
-- first. v11 casts the setting to int when it starts, so a value that is not a whole number (a
-- typo in `ALTER DATABASE ... SET engine.skip_min = ...`) made every call fail and nothing was
-- queued. v12 clears such a value for the call, with a WARNING naming the setting and the fix
-- (the server log keeps it), and v11 then uses its default (32).
-- LOCK, INVARIANT, CALLERS MAY ASSUME: those of queue_tis_v11 (no lock when there is nothing to
-- decide; otherwise scheduler_lock('queue_tis'), FOR UPDATE NOWAIT: SQLSTATE 55P03 at once when
-- another scheduler holds it).
CREATE OR REPLACE FUNCTION queue_tis_v12(p_max_tis int, p_job_id bigint DEFAULT NULL,
                                        p_now timestamptz DEFAULT NULL, p_page_factor int DEFAULT 2)
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int,
               try_number int, pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql
SET jit = off
AS $$
DECLARE
    v_skip_min text := current_setting('engine.skip_min', true);
BEGIN
    -- (Up to 9 digits: always inside int.)
    IF coalesce(v_skip_min, '') <> '' AND v_skip_min !~ '^\s*[+-]?[0-9]{1,9}\s*$' THEN
        RAISE WARNING 'engine.skip_min = % is not a whole number: queue_tis uses 32; fix it with ALTER DATABASE % SET engine.skip_min = 32 (or RESET engine.skip_min)',
            quote_literal(v_skip_min), quote_ident(current_database());
        PERFORM set_config('engine.skip_min', '', true);
    END IF;
    RETURN QUERY SELECT * FROM queue_tis_v11(p_max_tis, p_job_id, p_now, p_page_factor);
END;
$$;
