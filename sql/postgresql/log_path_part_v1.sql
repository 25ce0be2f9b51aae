-- log_path_part_v1(key, id): one component of a task log path, `<key>=<id>`, that is always a
-- safe file name of at most 255 bytes, whatever the id holds.
--   * an id made only of the id characters (A-Z a-z 0-9 _ . - : + ~), not '.' or '..', whose
--     `<key>=<id>` fits in 255 bytes is used as is: `dag_id=etl`,
--     `run_id=manual__2026-01-01T00:00:00+00:00`;
--   * any other id (longer, '..', or with '/', a space, a control or non-ASCII character:
--     written by hand or by an older version) becomes `<key>=<prefix>@<md5 of the whole id>`,
--     the prefix being its first 200 characters with every other character replaced by '_'.
--     '@' is not an id character, so such a name never equals the plain name of another id,
--     and the md5 keeps two ids that share their first 200 characters apart.
-- The key always precedes '=', so no component is '.' or '..'. Pure: no table, no lock.
-- Called by claim_tis_v2 for the dag_id, run_id and task_id components.
CREATE OR REPLACE FUNCTION log_path_part_v1(p_key text, p_id text)
RETURNS text
LANGUAGE sql IMMUTABLE STRICT
AS $$
    SELECT CASE WHEN p_id ~ '^[A-Za-z0-9_.:+~-]+$' AND p_id NOT IN ('.', '..')
                     AND octet_length(p_key) + 1 + octet_length(p_id) <= 255
                THEN p_key || '=' || p_id
                ELSE p_key || '=' || left(regexp_replace(p_id, '[^A-Za-z0-9_.:+~-]', '_', 'g'), 200) || '@' || md5(p_id)
           END
$$;
