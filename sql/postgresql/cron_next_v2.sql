-- cron_next_v2(expr, after): the first time strictly after `after` (to the minute, UTC) that a
-- 5-field cron expression fires, or NULL when none within ~5 years (e.g. "0 0 30 2 *").
-- New in v2: also NULL when the next fire time is not before 9999-01-01 (the horizon): every
-- fire time it returns is readable by Python and storable in MySQL's DATETIME, and the MySQL
-- version never steps past year 9999 (v1 raised "datetime field overflow" there). The same
-- horizon on both dialects, so both agree on which schedules still fire.
-- Pure: no table, no lock. Day matching follows croniter (what Airflow uses): when neither
-- day-of-month nor day-of-week is exactly '*', a day matches if either does ('*/1' counts as
-- restricted there, unlike Vixie cron).
CREATE OR REPLACE FUNCTION cron_next_v2(p_expr text, p_after timestamptz)
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
    c_horizon CONSTANT timestamp := '9999-01-01 00:00:00';
    t      timestamp := date_trunc('minute', least(p_after AT TIME ZONE 'UTC', c_horizon)) + interval '1 minute';
    v_dom_ok boolean;
    v_dow_ok boolean;
BEGIN
    FOR i IN 1..5000 LOOP  -- each step skips at least a whole minute/hour/day/month
        IF t >= c_horizon THEN
            RETURN NULL;
        END IF;
        IF NOT extract(month FROM t)::int = ANY (v_mon) THEN
            t := date_trunc('month', t) + interval '1 month';
            CONTINUE;
        END IF;
        v_dom_ok := extract(day FROM t)::int = ANY (v_dom);
        v_dow_ok := extract(dow FROM t)::int = ANY (v_dow);
        IF NOT (CASE WHEN v_or THEN v_dom_ok OR v_dow_ok ELSE v_dom_ok AND v_dow_ok END) THEN
            t := date_trunc('day', t) + interval '1 day';
            CONTINUE;
        END IF;
        IF NOT extract(hour FROM t)::int = ANY (v_hour) THEN
            t := date_trunc('hour', t) + interval '1 hour';
            CONTINUE;
        END IF;
        IF NOT extract(minute FROM t)::int = ANY (v_min) THEN
            t := t + interval '1 minute';
            CONTINUE;
        END IF;
        RETURN t AT TIME ZONE 'UTC';
    END LOOP;
    RETURN NULL;
END;
$$;
