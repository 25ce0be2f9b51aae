"""queue_tis_v15 (both dialects): on MySQL/MariaDB, queue_tis_v9 with skip entries, so that TIs
refused by full partitions or by their width at the head of a pool's queue are not read again at
every call (docs/critical-section.md, "queue_tis_v15"); on PostgreSQL v15 calls v14. The same
arguments, knobs, result, lock and rule. The named query `queue_tis` calls v15; v1..v14 stay
installed.

MySQL/MariaDB only (PostgreSQL has had its own since 0026):
- tables queue_skip (one entry per pool: its bound in queue order, min_wide) and queue_skip_part
  (the full partitions an entry relies on), written by queue_tis_v15 under the queue_tis lock.
  Deleting their rows is always safe (the next call reads the pool in full);
- table queue_skip_gate (a row per pool, filled here from pool and task_instance, then by the
  writers): a writer of a scheduled TI holds its pool's row shared until it commits; a call makes
  a new entry only while it holds the row exclusively;
- table queue_skip_log: the TIs written scheduled in a pool with an entry, until a call covered
  them;
- procedure stamp_scheduled_v1 (gate and log) and the triggers stamp_scheduled_insert and
  stamp_scheduled_update (AFTER INSERT / UPDATE ON task_instance, rows written scheduled).

Revision ID: 0030
Revises: 0029
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from engine.procedures import install, remove

revision = "0030"
down_revision = "0029"
branch_labels = None
depends_on = None

MYSQL_ONLY = ["stamp_scheduled_v1"]
NEW = ["queue_tis_v15"]
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
TRIGGERS = {
    "stamp_scheduled_insert": "AFTER INSERT ON task_instance",
    "stamp_scheduled_update": "AFTER UPDATE ON task_instance",
}


def is_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade():
    if not is_postgresql():
        op.create_table(
            "queue_skip",
            sa.Column("pool", sa.String(250), primary_key=True),
            # The bound: the last TI the entry covers, by its key in queue order.
            sa.Column("b_pw", sa.Integer, nullable=False),
            sa.Column("b_after", mysql.DATETIME(fsp=6), nullable=False),
            sa.Column("b_map", sa.Integer, nullable=False),
            sa.Column("b_id", sa.BigInteger, nullable=False),
            sa.Column("min_wide", sa.Integer, nullable=True),
            **MYSQL_TABLE,
        )
        op.create_table(
            "queue_skip_part",
            sa.Column("pool", sa.String(250), nullable=False),
            sa.Column("kind", sa.String(20), nullable=False),  # run, task, task_run, executor
            sa.Column("dag_run_id", sa.BigInteger, nullable=True),
            sa.Column("dag_id", sa.String(250), nullable=True),
            sa.Column("task_id", sa.String(250), nullable=True),
            sa.Column("executor", sa.String(250), nullable=True),
            **MYSQL_TABLE,
        )
        op.create_index("queue_skip_part_pool", "queue_skip_part", ["pool"])
        op.create_table("queue_skip_gate", sa.Column("pool", sa.String(250), primary_key=True), **MYSQL_TABLE)
        op.create_table(
            "queue_skip_log",
            sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
            sa.Column("ti_id", sa.BigInteger, nullable=False),
            **MYSQL_TABLE,
        )
        op.execute("INSERT IGNORE INTO queue_skip_gate (pool) SELECT name FROM pool")
        op.execute("INSERT IGNORE INTO queue_skip_gate (pool) SELECT DISTINCT pool FROM task_instance")
        install(op, MYSQL_ONLY, revision)
        for name, when in TRIGGERS.items():
            op.execute(f"CREATE TRIGGER {name} {when} FOR EACH ROW "
                       "BEGIN IF NEW.state = 'scheduled' THEN CALL stamp_scheduled_v1(NEW.id, NEW.pool); END IF; END")
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    if not is_postgresql():
        for name in TRIGGERS:
            op.execute(f"DROP TRIGGER IF EXISTS {name}")
        remove(op, MYSQL_ONLY)
        for table in ("queue_skip_log", "queue_skip_gate", "queue_skip_part", "queue_skip"):
            op.drop_table(table)
