-- cron_next_v3(expr, zone, after): the first instant strictly after `after` (to the minute)
-- at which a 5-field cron expression fires when read in time zone `zone` (an IANA name; the
-- DAG's timezone), or NULL when none within ~5 years or not before 9999-01-01 (as cron_next_v2).
-- New in v3: the zone. The wall-clock times of `zone` come from the table tz_offset (one row
-- per period of the zone: its UTC offset from utc_from until the next row's), which `engine
-- dags sync` fills from Python's zoneinfo; 'UTC' needs no rows and is cron_next_v2 itself.
-- Across a DST change it fires as croniter does with zoned datetimes (what Airflow uses):
--   * spring forward: a fire time in the skipped local hour fires once, at the transition
--     instant (the first instant after the gap: "30 2 * * *" fires at 03:00 local that day),
--     unless the hour field covers every hour: then it does not fire ("30 * * * *" fires at
--     01:30, then 03:30; croniter's rule);
--   * fall back: a fire time in the repeated local hour fires twice, once for each offset
--     ("30 2 * * *" fires at 02:30 summer time, then at 02:30 winter time, an hour later).
-- How: in each period the zone's wall clock is UTC shifted by the period's offset, so
-- cron_next_v2 on the shifted time answers within the period; past the period's end it goes
-- on in the next one (the gap rule first). Each step crosses one transition.
-- Reads tz_offset (primary key lookups); no lock. Raises when `zone` is not UTC and has no rows
-- (create_dag_runs records it against the DAG: sync the DAG again).
CREATE OR REPLACE FUNCTION cron_next_v3(p_expr text, p_zone text, p_after timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE STRICT
AS $$
DECLARE
    c_horizon CONSTANT timestamptz := '9999-01-01 00:00:00+00';
    v_off   int;          -- seconds east of UTC in the current period
    v_off2  int;          -- ... in the next one
    v_end   timestamptz;  -- when the current period ends (NULL: never)
    v_local timestamptz;  -- the zone's wall clock, written as if it were UTC: search after it
    v_fire  timestamptz;  -- a fire time on that wall clock
    v_hourly boolean;     -- the hour field covers every hour: a fire time in a gap is skipped
BEGIN
    IF p_zone = 'UTC' THEN
        RETURN cron_next_v2(p_expr, p_after);
    END IF;
    SELECT z.utc_offset INTO v_off FROM tz_offset z
    WHERE z.zone = p_zone AND z.utc_from <= p_after ORDER BY z.utc_from DESC LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'time zone % has no rows in tz_offset; run `engine dags sync` for the DAGs that use it',
            quote_literal(p_zone);
    END IF;
    SELECT min(z.utc_from) INTO v_end FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from > p_after;
    v_local := p_after + make_interval(secs => v_off);
    v_hourly := (SELECT count(DISTINCT h) FROM unnest(cron_field_v1(
                    (regexp_split_to_array(trim(p_expr), '\s+'))[2], 0, 23)) AS h) = 24;
    FOR i IN 1..1000 LOOP
        v_fire := cron_next_v2(p_expr, v_local);
        IF v_fire IS NULL THEN
            RETURN NULL;
        END IF;
        IF v_end IS NULL OR v_fire < v_end + make_interval(secs => v_off) THEN
            v_fire := v_fire - make_interval(secs => v_off);
            RETURN CASE WHEN v_fire < c_horizon THEN v_fire END;
        END IF;
        SELECT z.utc_offset INTO v_off2 FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from = v_end;
        IF v_off2 > v_off AND v_fire < v_end + make_interval(secs => v_off2) AND NOT v_hourly THEN
            RETURN v_end;  -- it fell in the skipped local hour: fire at the transition
        END IF;
        v_local := v_end + make_interval(secs => v_off2) - interval '1 second';
        v_off := v_off2;
        SELECT min(z.utc_from) INTO v_end FROM tz_offset z WHERE z.zone = p_zone AND z.utc_from > v_end;
    END LOOP;
    RETURN NULL;
END;
$$;
