"""queue_tis_v17 (both dialects): on MySQL/MariaDB, queue_tis_v16 whose final UPDATE appends its
usage in one statement instead of one row trigger CALL per TI, and whose scratch tables are Aria
tables on MariaDB (docs/critical-section.md, "queue_tis_v17"); on PostgreSQL v17 calls v15. The
same arguments, knobs, result, lock and rule. The named query `queue_tis` calls v17; v1..v16 stay
installed.

MySQL/MariaDB only: the row trigger usage_ti_update (revision 0020) is made again with a
condition: it appends nothing for a row that moves from scheduled to queued stamped with the
moment and job in @engine_usage_queued_at / @engine_usage_queued_by, which queue_tis_v17 sets
around its final UPDATE only (and appends those rows' usage itself). Every other write, and every
call of v1..v16, is tracked as before. Still before stamp_scheduled_update, as it was.

Revision ID: 0033
Revises: 0032
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0033"
down_revision = "0032"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v17"]
TI_ROW = "{0}.state, {0}.dag_run_id, {0}.dag_id, {0}.task_id, {0}.pool, {0}.executor, {0}.pool_slots"
TRACK = f"CALL track_usage_v1({TI_ROW.format('OLD')}, {TI_ROW.format('NEW')})"
TRIGGER = "CREATE TRIGGER usage_ti_update AFTER UPDATE ON task_instance FOR EACH ROW PRECEDES stamp_scheduled_update "
# (<=> throughout: a NULL anywhere must mean "not queue_tis_v17's row", so tracked.)
SKIPPING = (TRIGGER + "BEGIN IF @engine_usage_queued_at IS NULL OR NOT (OLD.state <=> 'scheduled' AND "
            "NEW.state <=> 'queued' AND NEW.queued_at <=> @engine_usage_queued_at AND "
            f"NEW.queued_by_job_id <=> @engine_usage_queued_by) THEN {TRACK}; END IF; END")


def is_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade():
    if not is_postgresql():
        op.execute("DROP TRIGGER IF EXISTS usage_ti_update")
        op.execute(SKIPPING)
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    if not is_postgresql():
        op.execute("DROP TRIGGER IF EXISTS usage_ti_update")
        op.execute(TRIGGER + TRACK)
