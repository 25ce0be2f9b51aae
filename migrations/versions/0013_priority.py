"""Priority that acts: reservations, aging, wide TIs, preemption (docs/priority.md).

- table pool_reservation: free slots of a pool kept for one scheduled TI (reason 'wide' or
  'preemption'); dropped when the TI is queued or stops waiting; one row per TI;
- queue_tis_v4 (both dialects): queue_tis_v3 plus reservations (reserving TIs served first,
  their held slots counted as used by the walk), aging (effective priority grows with the time
  a TI waits, capped) and 'wide' reservations after reserve_after seconds; on MariaDB it reads
  @@tx_isolation (MySQL: @@transaction_isolation) instead of information_schema;
  queue_tis_v1..v3 stay installed; a `preempting` TI holds its place in every limit;
- preemption: pool.preempt_margin (NULL: the pool is not preemptible), task.preemptible,
  task_instance.preempted_at / preempted_for (cooldown; for whom); preempt_v1 (both dialects)
  marks victims `preempting` and reserves their slots; heartbeat_v3 (the worker's heartbeat)
  tells the worker to stop them and moves them back to `scheduled` without using a retry;
- views changed in place (previous texts in sql/<dialect>/previous/0013/): limit_usage counts
  `preempting` TIs as active; pending_reasons says 'waiting for N preempted TI(s) to stop' and
  'slots reserved for it'; run_overview counts `preempting` TIs as unfinished;
  tick_log.tis_preempted counts each pass's preemptions.

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from engine.procedures import install, remove, restore

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
ID = sa.String(250).with_variant(sa.Text(), "postgresql")
STATE = sa.String(20).with_variant(sa.Text(), "postgresql")
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

CHANGED = ["limit_usage", "pending_reasons", "run_overview"]
NEW = ["queue_tis_v4", "preempt_v1", "heartbeat_v3"]
COLUMNS = [
    ("pool", sa.Column("preempt_margin", sa.Integer, nullable=True)),
    ("task", sa.Column("preemptible", sa.Boolean, nullable=False, server_default=sa.false())),
    ("task_instance", sa.Column("preempted_at", TS, nullable=True)),
    ("task_instance", sa.Column("preempted_for", sa.BigInteger, nullable=True)),
    ("tick_log", sa.Column("tis_preempted", sa.Integer, nullable=False, server_default="0")),
]


def upgrade():
    op.create_table(
        "pool_reservation",
        sa.Column("ti_id", sa.BigInteger, sa.ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True,
                  autoincrement=False),
        sa.Column("pool", ID, nullable=False),
        sa.Column("slots", sa.Integer, nullable=False),
        sa.Column("reason", STATE, nullable=False),  # wide, preemption
        sa.Column("since", TS, nullable=False),
        **MYSQL_TABLE,
    )
    op.create_index("pool_reservation_pool", "pool_reservation", ["pool", "reason"])
    for table, column in COLUMNS:
        op.add_column(table, column)
    install(op, CHANGED + NEW, revision)


def downgrade():
    remove(op, NEW)
    restore(op, CHANGED, revision, down_revision)
    op.execute("UPDATE task_instance SET state = 'running' WHERE state = 'preempting'")  # v2 cannot stop them
    for table, column in reversed(COLUMNS):
        op.drop_column(table, column.name)
    op.drop_index("pool_reservation_pool", table_name="pool_reservation")
    op.drop_table("pool_reservation")
