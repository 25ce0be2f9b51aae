-- cron_prev_v3(expr, zone, at): the last instant at or before `at` (to the minute) at which a
-- 5-field cron expression fires when read in time zone `zone`, or NULL when none within ~5
-- years. The mirror of cron_next_v3 (same table tz_offset, same DST rules: a fire time in a
-- skipped local hour fires at the transition instant, or not at all when the hour field covers
-- every hour; one in a repeated hour fires twice);
-- 'UTC' is cron_prev_v1 itself. (There is no cron_prev_v2: v3 matches cron_next_v3.)
-- Reads tz_offset (primary key lookups); no lock. Raises when `zone` is not UTC and has no rows.
CREATE OR REPLACE FUNCTION cron_prev_v3(p_expr text, p_zone text, p_at timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql STABLE STRICT
AS $$
DECLARE
    v_off    int;          -- seconds east of UTC in the current period
    v_start  timestamptz;  -- when the current period began
    v_off0   int;          -- ... the previous period's offset
    v_start0 timestamptz;  -- ... and start
    v_local  timestamptz;  -- the zone's wall clock, written as if it were UTC: search at or before it
    v_fire   timestamptz;
    v_hourly boolean;      -- the hour field covers every hour: a fire time in a gap is skipped
BEGIN
    IF p_zone = 'UTC' THEN
        RETURN cron_prev_v1(p_expr, p_at);
    END IF;
    SELECT z.utc_offset, z.utc_from INTO v_off, v_start FROM tz_offset z
    WHERE z.zone = p_zone AND z.utc_from <= p_at ORDER BY z.utc_from DESC LIMIT 1;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'time zone % has no rows in tz_offset; run `engine dags sync` for the DAGs that use it',
            quote_literal(p_zone);
    END IF;
    v_local := p_at + make_interval(secs => v_off);
    v_hourly := (SELECT count(DISTINCT h) FROM unnest(cron_field_v1(
                    (regexp_split_to_array(trim(p_expr), '\s+'))[2], 0, 23)) AS h) = 24;
    FOR i IN 1..1000 LOOP
        v_fire := cron_prev_v1(p_expr, v_local);
        IF v_fire IS NULL THEN
            RETURN NULL;
        END IF;
        IF v_fire >= v_start + make_interval(secs => v_off) THEN
            RETURN v_fire - make_interval(secs => v_off);
        END IF;
        SELECT z.utc_offset, z.utc_from INTO v_off0, v_start0 FROM tz_offset z
        WHERE z.zone = p_zone AND z.utc_from < v_start ORDER BY z.utc_from DESC LIMIT 1;
        IF NOT FOUND THEN  -- the first period reaches back for ever
            RETURN v_fire - make_interval(secs => v_off);
        END IF;
        IF v_off > v_off0 AND v_fire >= v_start + make_interval(secs => v_off0) AND NOT v_hourly THEN
            RETURN v_start;  -- it fell in the local hour skipped at v_start: fire at the transition
        END IF;
        v_local := v_start + make_interval(secs => v_off0) - interval '1 second';
        v_off := v_off0;
        v_start := v_start0;
    END LOOP;
    RETURN NULL;
END;
$$;
