-- cron_field_v1(field, lo, hi): the sorted values one field of a 5-field cron allows.
-- Pure: no table, no lock. `engine dags sync` has already validated the field with croniter
-- and translated month/day names to numbers, so only digits, * , - / reach here.
CREATE OR REPLACE FUNCTION cron_field_v1(p_field text, p_lo int, p_hi int)
RETURNS int[]
LANGUAGE plpgsql IMMUTABLE STRICT
AS $$
DECLARE
    v_part  text;
    v_range text;
    v_step  int;
    v_from  int;
    v_to    int;
    v_out   int[] := '{}';
BEGIN
    FOREACH v_part IN ARRAY string_to_array(p_field, ',') LOOP
        v_step  := coalesce(nullif(split_part(v_part, '/', 2), '')::int, 1);
        v_range := split_part(v_part, '/', 1);
        IF v_range = '*' THEN
            v_from := p_lo;
            v_to := p_hi;
        ELSIF position('-' IN v_range) > 0 THEN
            v_from := split_part(v_range, '-', 1)::int;
            v_to := split_part(v_range, '-', 2)::int;
        ELSE
            v_from := v_range::int;
            -- "5/15" means from 5 to the end every 15; a bare "5" is just 5.
            v_to := CASE WHEN position('/' IN v_part) > 0 THEN p_hi ELSE v_from END;
        END IF;
        v_out := v_out || ARRAY(SELECT generate_series(v_from, v_to, v_step));
    END LOOP;
    RETURN ARRAY(SELECT DISTINCT v FROM unnest(v_out) AS v ORDER BY v);
END;
$$;
