"""Results, mapping over results, final trigger events, batched firing.

- table task_result: the result of a TI's successful try (JSON), one row per TI, deleted with
  its TI; view task_results reads it with the TI's ids;
- task.map_upstream: the upstream a task is mapped over (`.expand(x=upstream.output)`), and
  task.inputs: the keyword arguments that refer to upstream outputs (written by dags sync);
- finish_ti_v3: finish_ti_v2 plus the result, stored in the same transaction as the success;
- task_output_v1 / task_inputs_v1: an upstream's output in a run, a TI's inputs (for workers);
- schedule_tis_v3: schedule_tis_v2 plus dynamic mapping (the number of mapped TIs is decided
  when the upstream succeeds);
- fire_triggers_v1: a batch of fired triggers per call, final events ending the try.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

from engine.procedures import install, remove

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
ID = sa.String(250).with_variant(sa.Text(), "postgresql")
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

NEW = ["finish_ti_v3", "task_output_v1", "task_inputs_v1", "task_results", "schedule_tis_v3", "fire_triggers_v1"]


def upgrade():
    op.create_table(
        "task_result",
        sa.Column("ti_id", sa.BigInteger, sa.ForeignKey("task_instance.id", ondelete="CASCADE"), primary_key=True,
                  autoincrement=False),
        sa.Column("try_number", sa.Integer, nullable=False),
        sa.Column("value", JSON, nullable=False),
        sa.Column("created_at", TS, nullable=False),
        **MYSQL_TABLE,
    )
    op.add_column("task", sa.Column("map_upstream", ID, nullable=True))  # NULL: not mapped over a result
    op.add_column("task", sa.Column("inputs", JSON, nullable=True))      # [{"name", "upstream", "mapped"}]
    install(op, NEW, revision)


def downgrade():
    remove(op, list(reversed(NEW)))
    op.drop_column("task", "inputs")
    op.drop_column("task", "map_upstream")
    op.drop_table("task_result")
