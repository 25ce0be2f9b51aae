"""The usage counters stay right when a pool's include_deferred changes while TIs enter `deferred`.

Before: a TI moved to `deferred` (or inserted so) while a change of its pool's include_deferred
was not committed read the old flag in its trigger, and the change's count of the pool's deferred
TIs had not seen it: counted by neither, the counters drifted from the recount (an undercount
lets queue_tis exceed the pool's limits until `engine db check --repair`).

- PostgreSQL: track_pool_usage_v2, whose first change that counts takes LOCK TABLE task_instance
  IN SHARE MODE (waits for every TI writer in flight, holds the next ones until it commits); the
  trigger usage_pool calls it. Made again in the migration's transaction (DDL is transactional).
- MySQL/MariaDB: track_usage_v2 and the inline body of usage_ti_update read a deferred row's pool
  flag with a locking read (holding the pool row shared until the writer commits, so the pool's
  UPDATE waits for it); track_pool_usage_v2 counts with a locking read. The triggers usage_ti_*
  and usage_pool_* are made again under LOCK TABLES task_instance WRITE, pool WRITE (no row is
  written without its trigger; DDL commits on its own there).

Downgrade: the triggers as revision 0036 (MySQL/MariaDB) and 0020 (PostgreSQL) made them; the v2
routines go.

Revision ID: 0044
Revises: 0043
Create Date: 2026-11-25
"""
import importlib.util
from pathlib import Path

from alembic import op

from engine.procedures import install, remove

revision = "0044"
down_revision = "0043"
branch_labels = None
depends_on = None

NEW = {"postgresql": ["track_pool_usage_v2"], "mysql": ["track_usage_v2", "track_pool_usage_v2"]}
PG_TRIGGER = "CREATE TRIGGER usage_pool AFTER INSERT OR DELETE OR UPDATE ON pool FOR EACH ROW EXECUTE FUNCTION {}()"


def _r0036():
    """Revision 0036's trigger definitions (the ones this revision replaces, for the downgrade)."""
    path = Path(__file__).with_name("0036_usage_triggers_inline.py")
    spec = importlib.util.spec_from_file_location("r0036", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


HOLDING = "('queued', 'running', 'preempting')"
TI_ROW = "{0}.state, {0}.dag_run_id, {0}.dag_id, {0}.task_id, {0}.pool, {0}.executor, {0}.pool_slots"
SAME_KEYS = ("OLD.dag_run_id <=> NEW.dag_run_id AND OLD.dag_id <=> NEW.dag_id AND OLD.task_id <=> NEW.task_id "
             "AND OLD.pool <=> NEW.pool AND OLD.executor <=> NEW.executor AND OLD.pool_slots <=> NEW.pool_slots")
QUEUED_BY_CALL = ("OLD.state <=> 'scheduled' AND NEW.state <=> 'queued' AND NEW.queued_at <=> @engine_usage_queued_at "
                  "AND NEW.queued_by_job_id <=> @engine_usage_queued_by")


def holds(row: str) -> str:
    """`<row>_holds` as track_usage_v2 sets it: a deferred row's pool flag by a locking read."""
    var = "o_holds" if row == "OLD" else "n_holds"
    return (f"IF {row}.state = 'deferred' THEN SELECT COALESCE(MAX(p.include_deferred), FALSE) INTO {var} "
            f"FROM pool p WHERE p.name = {row}.pool LOCK IN SHARE MODE; "
            f"ELSE SET {var} = COALESCE({row}.state IN {HOLDING}, FALSE); END IF; ")


def delta(row: str, sign: str) -> str:
    return (f"INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots) VALUES "
            f"({row}.dag_run_id, {row}.dag_id, {row}.task_id, {row}.pool, {row}.executor, {sign}1, {sign}{row}.pool_slots); ")


# No comments inside bodies: engine/dbtriggers.py folds a body's whitespace onto one line.
UPDATE = ("CREATE TRIGGER usage_ti_update AFTER UPDATE ON task_instance FOR EACH ROW PRECEDES stamp_scheduled_update "
          "BEGIN DECLARE o_holds, n_holds BOOLEAN DEFAULT FALSE; "
          f"IF NOT (OLD.state <=> NEW.state AND {SAME_KEYS}) "
          f"AND (@engine_usage_queued_at IS NULL OR NOT ({QUEUED_BY_CALL})) THEN "
          + holds("OLD") + holds("NEW")
          + f"IF NOT (o_holds AND n_holds AND {SAME_KEYS}) THEN "
          + "IF o_holds THEN " + delta("OLD", "-") + "END IF; "
          + "IF n_holds THEN " + delta("NEW", "") + "END IF; "
          + "END IF; END IF; END")
INSERT = ("CREATE TRIGGER usage_ti_insert AFTER INSERT ON task_instance FOR EACH ROW PRECEDES stamp_scheduled_insert "
          f"BEGIN IF NEW.state IN ('queued', 'running', 'preempting', 'deferred') THEN "
          f"CALL track_usage_v2(NULL, NULL, NULL, NULL, NULL, NULL, NULL, {TI_ROW.format('NEW')}); END IF; END")
DELETE = ("CREATE TRIGGER usage_ti_delete AFTER DELETE ON task_instance FOR EACH ROW "
          f"BEGIN IF OLD.state IN ('queued', 'running', 'preempting', 'deferred') THEN "
          f"CALL track_usage_v2({TI_ROW.format('OLD')}, NULL, NULL, NULL, NULL, NULL, NULL, NULL); END IF; END")
POOL = {
    "usage_pool_insert": "AFTER INSERT ON pool FOR EACH ROW CALL track_pool_usage_v{v}(NULL, NULL, NEW.name, NEW.include_deferred)",
    "usage_pool_update": ("AFTER UPDATE ON pool FOR EACH ROW "
                          "CALL track_pool_usage_v{v}(OLD.name, OLD.include_deferred, NEW.name, NEW.include_deferred)"),
    "usage_pool_delete": "AFTER DELETE ON pool FOR EACH ROW CALL track_pool_usage_v{v}(OLD.name, OLD.include_deferred, NULL, NULL)",
}


def swap_mysql(ti_triggers: list[str], pool_version: int) -> None:
    """Drop and make the usage triggers of task_instance and pool again while both tables are
    write-locked (no row is written without its trigger)."""
    op.execute("LOCK TABLES task_instance WRITE, pool WRITE")
    try:
        for name in ("usage_ti_update", "usage_ti_insert", "usage_ti_delete", *POOL):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        for definition in ti_triggers:
            op.execute(definition)
        for name, rest in POOL.items():
            op.execute(f"CREATE TRIGGER {name} " + rest.format(v=pool_version))
    finally:
        op.execute("UNLOCK TABLES")


def swap_postgresql(version: int) -> None:
    """usage_pool made again in the migration's transaction, task_instance locked first: TI
    writers lock task_instance, then read pool in their trigger; taken the other way round (pool
    for the trigger, then task_instance for a later revision of the same run, as 0041's downgrade
    does), a writer in between deadlocked with the migration."""
    op.execute("LOCK TABLE task_instance IN SHARE ROW EXCLUSIVE MODE")
    op.execute("DROP TRIGGER IF EXISTS usage_pool ON pool")
    op.execute(PG_TRIGGER.format(f"track_pool_usage_v{version}"))


def upgrade():
    dialect = "postgresql" if op.get_bind().dialect.name == "postgresql" else "mysql"
    install(op, NEW[dialect], revision)
    if dialect == "postgresql":
        swap_postgresql(2)
    else:
        swap_mysql([UPDATE, INSERT, DELETE], 2)


def downgrade():
    dialect = "postgresql" if op.get_bind().dialect.name == "postgresql" else "mysql"
    if dialect == "postgresql":
        swap_postgresql(1)
    else:
        r0036 = _r0036()
        swap_mysql([r0036.UPDATE, r0036.INSERT, r0036.DELETE], 1)
    remove(op, NEW[dialect])
