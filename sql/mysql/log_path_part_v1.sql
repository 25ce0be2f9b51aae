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
-- MySQL: the character test deletes every allowed character and counts what is left (no
-- anchors: MariaDB's '$' also matches before a final newline; no comparison with '': the
-- PAD SPACE collation finds ' ' equal to ''); LENGTH() counts bytes, like PostgreSQL's octet_length().
-- MD5() hashes the UTF-8 bytes, as PostgreSQL's md5() does: both dialects name a log alike.
CREATE FUNCTION log_path_part_v1(p_key VARCHAR(20), p_id TEXT)
RETURNS TEXT
DETERMINISTIC NO SQL
BEGIN
    IF p_key IS NULL OR p_id IS NULL THEN
        RETURN NULL;  -- PostgreSQL: STRICT
    END IF;
    IF CHAR_LENGTH(p_id) > 0 AND CHAR_LENGTH(REGEXP_REPLACE(p_id, '[A-Za-z0-9_.:+~-]', '')) = 0
       AND p_id NOT IN ('.', '..') AND LENGTH(p_key) + 1 + LENGTH(p_id) <= 255 THEN
        RETURN CONCAT(p_key, '=', p_id);
    END IF;
    RETURN CONCAT(p_key, '=', LEFT(REGEXP_REPLACE(p_id, '[^A-Za-z0-9_.:+~-]', '_'), 200), '@', MD5(p_id));
END
