-- cron_prev_v1(expr, at): the last time at or before `at` (to the minute, UTC) that a 5-field
-- cron expression fires, or NULL when none within ~5 years. The mirror of cron_next_v1.
-- Pure: no table, no lock.
CREATE OR REPLACE FUNCTION cron_prev_v1(p_expr text, p_at timestamptz)
RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE STRICT
AS $$
DECLARE
    f      text[] := regexp_split_to_array(trim(p_expr), '\s+');
    v_min  int[] := cron_field_v1(f[1], 0, 59);
    v_hour int[] := cron_field_v1(f[2], 0, 23);
    v_dom  int[] := cron_field_v1(f[3], 1, 31);
    v_mon  int[] := cron_field_v1(f[4], 1, 12);
    v_dow  int[] := ARRAY(SELECT DISTINCT mod(d, 7) FROM unnest(cron_field_v1(f[5], 0, 7)) AS d);
    v_or   boolean := f[3] <> '*' AND f[5] <> '*';
    t      timestamp := date_trunc('minute', p_at AT TIME ZONE 'UTC');
    v_dom_ok boolean;
    v_dow_ok boolean;
BEGIN
    FOR i IN 1..5000 LOOP  -- each step goes back to the last minute of the previous unit
        IF NOT extract(month FROM t)::int = ANY (v_mon) THEN
            t := date_trunc('month', t) - interval '1 minute';
            CONTINUE;
        END IF;
        v_dom_ok := extract(day FROM t)::int = ANY (v_dom);
        v_dow_ok := extract(dow FROM t)::int = ANY (v_dow);
        IF NOT (CASE WHEN v_or THEN v_dom_ok OR v_dow_ok ELSE v_dom_ok AND v_dow_ok END) THEN
            t := date_trunc('day', t) - interval '1 minute';
            CONTINUE;
        END IF;
        IF NOT extract(hour FROM t)::int = ANY (v_hour) THEN
            t := date_trunc('hour', t) - interval '1 minute';
            CONTINUE;
        END IF;
        IF NOT extract(minute FROM t)::int = ANY (v_min) THEN
            t := t - interval '1 minute';
            CONTINUE;
        END IF;
        RETURN t AT TIME ZONE 'UTC';
    END LOOP;
    RETURN NULL;
END;
$$;
