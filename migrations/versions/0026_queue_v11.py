"""queue_tis_v11 (both dialects): on PostgreSQL, queue_tis_v10 with skip entries, so that TIs
refused by full partitions or by their width at the head of a pool's queue are not read again at
every call (docs/critical-section.md, "queue_tis_v11"). On MySQL/MariaDB v11 calls v10. The same
arguments, knobs, result, lock and rule. The named query `queue_tis` calls v11; v1..v10 stay
installed.

PostgreSQL only:
- task_instance.sched_xid: the id of the transaction that last wrote the TI as scheduled, stamped
  by the trigger stamp_scheduled (function stamp_scheduled_v1) on every client's writes; index
  task_instance_sched_xid (sched_xid) WHERE state = 'scheduled';
- index task_instance_queue_key (pool, -priority_weight, run_after, map_index, id) WHERE state =
  'scheduled': the queue order as one ascending key, so a row comparison starts a scan anywhere;
- tables queue_skip (one entry per pool: its bound in queue order, xmin, min_wide) and
  queue_skip_part (the full partitions an entry relies on), written by queue_tis_v11 under the
  queue_tis lock. Deleting their rows is always safe (the next call reads the pool in full).

Revision ID: 0026
Revises: 0025
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

from engine.procedures import install, remove

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

PG_ONLY = ["stamp_scheduled_v1"]
NEW = ["queue_tis_v11"]
TRIGGER = ("CREATE TRIGGER stamp_scheduled BEFORE INSERT OR UPDATE ON task_instance FOR EACH ROW "
           "WHEN (NEW.state = 'scheduled') EXECUTE FUNCTION stamp_scheduled_v1()")


def is_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade():
    if is_postgresql():
        op.add_column("task_instance", sa.Column("sched_xid", sa.BigInteger, nullable=True))
        op.create_index("task_instance_sched_xid", "task_instance", ["sched_xid"],
                        postgresql_where=sa.text("state = 'scheduled'"))
        # The queue order as one ascending key (a row comparison starts a scan anywhere in it;
        # the bigint keeps -priority_weight inside its type for every int priority).
        op.create_index("task_instance_queue_key", "task_instance",
                        ["pool", sa.text("(-(priority_weight::bigint))"), "run_after", "map_index", "id"],
                        postgresql_where=sa.text("state = 'scheduled'"))
        op.create_table(
            "queue_skip",
            sa.Column("pool", sa.Text, primary_key=True),
            # The bound: the last TI the entry covers, by its key in queue order.
            sa.Column("b_pw", sa.Integer, nullable=False),
            sa.Column("b_after", sa.DateTime(timezone=True), nullable=False),
            sa.Column("b_map", sa.Integer, nullable=False),
            sa.Column("b_id", sa.BigInteger, nullable=False),
            sa.Column("seen_xmin", sa.BigInteger, nullable=False),
            sa.Column("min_wide", sa.Integer, nullable=True),
        )
        op.create_table(
            "queue_skip_part",
            sa.Column("pool", sa.Text, nullable=False),
            sa.Column("kind", sa.Text, nullable=False),  # run, task, task_run, executor
            sa.Column("dag_run_id", sa.BigInteger, nullable=True),
            sa.Column("dag_id", sa.Text, nullable=True),
            sa.Column("task_id", sa.Text, nullable=True),
            sa.Column("executor", sa.Text, nullable=True),
        )
        op.create_index("queue_skip_part_pool", "queue_skip_part", ["pool"])
        install(op, PG_ONLY, revision)
        op.execute(TRIGGER)
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    if is_postgresql():
        op.execute("DROP TRIGGER IF EXISTS stamp_scheduled ON task_instance")
        remove(op, PG_ONLY)
        op.drop_table("queue_skip_part")
        op.drop_table("queue_skip")
        op.drop_index("task_instance_queue_key", table_name="task_instance")
        op.drop_index("task_instance_sched_xid", table_name="task_instance")
        op.drop_column("task_instance", "sched_xid")
