"""A hand edit of what queue_tis decides on waits for a call in flight (guard_scheduled_v1).

queue_tis locks no TI it considers: a call decides on a TI's pool, width, executor, queue key,
run and task as it read them, and its final UPDATE checks only that the TI is still scheduled.
The engine never changes those columns of a scheduled TI; an UPDATE that does (a DBA's), committed
while a call ran, could have the call queue the TI against its old pool's room (its new pool then
exceeded by it; on MySQL/MariaDB a logged TI moved past its skip entry's bound also failed the call
with 1062). Now such an UPDATE takes scheduler_lock('queue_tis') shared until it commits: it waits
for a call in flight, and calls find the lock busy meanwhile (docs/operations.md, "Editing a
waiting TI by hand").

- PostgreSQL: function guard_scheduled_v1 and trigger guard_scheduled, BEFORE UPDATE ON
  task_instance FOR EACH ROW, its WHEN clause the change above (evaluated without a function
  call, so other updates pay only the comparison).
- MySQL/MariaDB: procedure guard_scheduled_v1, called first by the trigger stamp_scheduled_update
  (which already runs for every update of a row that is scheduled after it), made again under
  LOCK TABLES task_instance WRITE (no TI is written without its trigger; DDL commits on its own).

Downgrade: the trigger goes (PostgreSQL) or is made again as revision 0043 made it (MySQL/MariaDB);
guard_scheduled_v1 goes.

Revision ID: 0045
Revises: 0044
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0045"
down_revision = "0044"
branch_labels = None
depends_on = None

NEW = ["guard_scheduled_v1"]
# The columns a call decides on (map_index is not one: schedule_tis_v3 numbers a mapped TI it has
# just scheduled in its own transaction, which no call has seen).
DECIDED = ["pool", "pool_slots", "executor", "priority_weight", "run_after", "dag_run_id", "dag_id", "task_id"]
PG_TRIGGER = ("CREATE TRIGGER guard_scheduled BEFORE UPDATE ON task_instance FOR EACH ROW "
              "WHEN (OLD.state = 'scheduled' AND NEW.state = 'scheduled' AND ("
              + ", ".join(f"OLD.{c}" for c in DECIDED) + ") IS DISTINCT FROM ("
              + ", ".join(f"NEW.{c}" for c in DECIDED) + ")) EXECUTE FUNCTION guard_scheduled_v1()")
# No comments inside bodies: engine/dbtriggers.py folds a body's whitespace onto one line.
STAMP_0043 = ("CREATE TRIGGER stamp_scheduled_update AFTER UPDATE ON task_instance FOR EACH ROW "
              "FOLLOWS usage_ti_update BEGIN IF NEW.state = 'scheduled' THEN "
              "CALL stamp_scheduled_v2(NEW.id, NEW.pool); END IF; END")
STAMP = ("CREATE TRIGGER stamp_scheduled_update AFTER UPDATE ON task_instance FOR EACH ROW "
         "FOLLOWS usage_ti_update BEGIN IF NEW.state = 'scheduled' THEN "
         "IF OLD.state = 'scheduled' AND NOT (" + " AND ".join(f"OLD.{c} <=> NEW.{c}" for c in DECIDED) + ") THEN "
         "CALL guard_scheduled_v1(); END IF; "
         "CALL stamp_scheduled_v2(NEW.id, NEW.pool); END IF; END")


def swap_stamp(definition: str) -> None:
    """stamp_scheduled_update made again while task_instance is write-locked."""
    op.execute("LOCK TABLES task_instance WRITE")
    try:
        op.execute("DROP TRIGGER IF EXISTS stamp_scheduled_update")
        op.execute(definition)
    finally:
        op.execute("UNLOCK TABLES")


def upgrade():
    install(op, NEW, revision)
    if op.get_bind().dialect.name == "postgresql":
        op.execute(PG_TRIGGER)
    else:
        swap_stamp(STAMP)


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS guard_scheduled ON task_instance")
    else:
        swap_stamp(STAMP_0043)
    remove(op, NEW)
