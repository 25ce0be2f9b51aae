"""MySQL/MariaDB: the usage counters' row triggers on task_instance stop calling track_usage_v1
for rows whose usage cannot change. A CALL from a row trigger costs MariaDB ~30 us a row before
the procedure does anything, and most writes of a TI change nothing the counters hold: a
heartbeat or a log path on a running TI, an updated_at, a TI inserted as `none` or deleted as
`success`. 1,000 such rows updated in one statement: 44 ms with the CALL, 18 ms without
(docs/dialects.md).

- usage_ti_update: its body is track_usage_v1's rule, written inline (no CALL), behind two tests
  that need no query: nothing that counts changed (same state, same partition keys), or the row
  is one of queue_tis_v17/v18's final UPDATE (the condition of revision 0033, unchanged). Only a
  row leaving or entering `deferred` reads its pool's include_deferred, as before.
- usage_ti_insert / usage_ti_delete: CALL track_usage_v1 only for a row that may hold (queued,
  running, preempting, deferred); the procedure appends nothing for the others anyway.

The counters' contract is unchanged (tests/test_usage_counters.py: counters + deltas = recount
after random changes). PostgreSQL: nothing (statement triggers with transition tables; no
per-row cost of this kind).

The triggers are made again under LOCK TABLES ... WRITE of task_instance: MySQL commits each DDL
statement on its own, and no TI is written between the DROP and the CREATE of a trigger (revision
0033 had that window). Downgrade: revision 0035's triggers, made again the same way.

Revision ID: 0036
Revises: 0035
Create Date: 2026-11-25
"""
from alembic import op

revision = "0036"
down_revision = "0035"
branch_labels = None
depends_on = None

HOLDING = "('queued', 'running', 'preempting')"
TI_ROW = "{0}.state, {0}.dag_run_id, {0}.dag_id, {0}.task_id, {0}.pool, {0}.executor, {0}.pool_slots"
TRACK = f"CALL track_usage_v1({TI_ROW.format('OLD')}, {TI_ROW.format('NEW')})"
SAME_KEYS = ("OLD.dag_run_id <=> NEW.dag_run_id AND OLD.dag_id <=> NEW.dag_id AND OLD.task_id <=> NEW.task_id "
             "AND OLD.pool <=> NEW.pool AND OLD.executor <=> NEW.executor AND OLD.pool_slots <=> NEW.pool_slots")
# Revision 0033's condition: queue_tis_v17/v18 append these rows' usage themselves.
QUEUED_BY_CALL = ("OLD.state <=> 'scheduled' AND NEW.state <=> 'queued' AND NEW.queued_at <=> @engine_usage_queued_at "
                  "AND NEW.queued_by_job_id <=> @engine_usage_queued_by")


def holds(row: str) -> str:
    """`<row>_holds` as track_usage_v1 sets it (o_holds / n_holds)."""
    var = "o_holds" if row == "OLD" else "n_holds"
    return (f"IF {row}.state = 'deferred' THEN SET {var} = EXISTS (SELECT 1 FROM pool p WHERE p.name = {row}.pool "
            f"AND p.include_deferred); ELSE SET {var} = COALESCE({row}.state IN {HOLDING}, FALSE); END IF; ")


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
          f"CALL track_usage_v1(NULL, NULL, NULL, NULL, NULL, NULL, NULL, {TI_ROW.format('NEW')}); END IF; END")
DELETE = ("CREATE TRIGGER usage_ti_delete AFTER DELETE ON task_instance FOR EACH ROW "
          f"BEGIN IF OLD.state IN ('queued', 'running', 'preempting', 'deferred') THEN "
          f"CALL track_usage_v1({TI_ROW.format('OLD')}, NULL, NULL, NULL, NULL, NULL, NULL, NULL); END IF; END")

# Revision 0020's (insert, delete) and 0033's (update) definitions, for the downgrade.
OLD_UPDATE = ("CREATE TRIGGER usage_ti_update AFTER UPDATE ON task_instance FOR EACH ROW PRECEDES stamp_scheduled_update "
              f"BEGIN IF @engine_usage_queued_at IS NULL OR NOT ({QUEUED_BY_CALL}) THEN {TRACK}; END IF; END")
OLD_INSERT = ("CREATE TRIGGER usage_ti_insert AFTER INSERT ON task_instance FOR EACH ROW PRECEDES stamp_scheduled_insert "
              f"CALL track_usage_v1(NULL, NULL, NULL, NULL, NULL, NULL, NULL, {TI_ROW.format('NEW')})")
OLD_DELETE = ("CREATE TRIGGER usage_ti_delete AFTER DELETE ON task_instance FOR EACH ROW "
              f"CALL track_usage_v1({TI_ROW.format('OLD')}, NULL, NULL, NULL, NULL, NULL, NULL, NULL)")


def swap(definitions: list[str]) -> None:
    """Drop and make the triggers again while task_instance is write-locked (no TI is written
    without its trigger; the lock ends with UNLOCK TABLES, DDL having committed already)."""
    op.execute("LOCK TABLES task_instance WRITE")
    try:
        for name in ("usage_ti_update", "usage_ti_insert", "usage_ti_delete"):
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        for definition in definitions:
            op.execute(definition)
    finally:
        op.execute("UNLOCK TABLES")


def upgrade():
    if op.get_bind().dialect.name != "postgresql":
        swap([UPDATE, INSERT, DELETE])


def downgrade():
    if op.get_bind().dialect.name != "postgresql":
        swap([OLD_UPDATE, OLD_INSERT, OLD_DELETE])
