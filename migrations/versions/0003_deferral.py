"""Deferral and drain: the trigger table, the TI's resume columns, drain flags, and the
procedures that move TIs in and out of `deferred` (docs/deferral.md).

Pre-release, the procedures this issue changes were edited in place (no _v2 copies):
queue_tis_v1, claim_tis_v1, create_dag_runs_v1 and the views limit_usage and pending_reasons.
This revision reinstalls them so `engine db check` records their new text. pending_reasons
reads columns added here, so it is installed here, not by 0001. The text each had before is
kept in sql/<dialect>/previous/0003/ (revisions 0001 and 0002 install it): downgrading removes
what this revision added and puts queue_tis_v1, claim_tis_v1, create_dag_runs_v1 and
limit_usage back as 0002 had them, so 0002 is a supported target like any other revision.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

from engine.procedures import install, remove, restore

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

# The types of 0001, the same on both dialects.
TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
ID = sa.String(250).with_variant(sa.Text(), "postgresql")
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

# Installed (or reinstalled) here, in dependency order.
CHANGED = ["limit_usage", "queue_tis_v1", "claim_tis_v1", "create_dag_runs_v1"]
NEW = ["pending_reasons", "defer_ti_v1", "fire_trigger_v1", "claim_triggers_v1", "send_event_v1", "drain_status"]


def upgrade():
    op.create_table(
        "trigger",  # one row per deferral: what the TI waits for, who runs it, how it ended
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("classpath", sa.Text, nullable=False),      # "module.path:Class"
        sa.Column("kwargs", JSON, nullable=False),
        sa.Column("ti_id", sa.BigInteger, nullable=True),      # the deferred TI
        sa.Column("created_at", TS, nullable=False),
        sa.Column("timeout_at", TS, nullable=True),            # NULL: waits for ever
        sa.Column("triggerer_job_id", sa.BigInteger, nullable=True),  # NULL: nobody runs it yet
        sa.Column("fired_at", TS, nullable=True),              # NULL: still waiting
        sa.Column("event", JSON, nullable=True),
        sa.Column("error", sa.Text, nullable=True),            # why it ended without an event
        **MYSQL_TABLE,
    )
    op.create_index("trigger_waiting", "trigger", ["fired_at", "triggerer_job_id"])
    op.create_index("trigger_timeout", "trigger", ["fired_at", "timeout_at"])
    op.add_column("task_instance", sa.Column("trigger_id", sa.BigInteger, nullable=True))
    op.add_column("task_instance", sa.Column("next_method", ID, nullable=True))  # set: waiting to resume
    op.add_column("task_instance", sa.Column("next_kwargs", JSON, nullable=True))
    op.create_index("task_instance_trigger", "task_instance", ["trigger_id"])
    op.add_column("dag", sa.Column("is_draining", sa.Boolean, nullable=False, server_default=sa.false()))
    op.create_table(
        "deployment",  # one row: deployment-wide flags
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=False),
        sa.Column("is_draining", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("drain_started_at", TS, nullable=True),
        sa.CheckConstraint("id = 1", name="deployment_one_row"),
        **MYSQL_TABLE,
    )
    op.bulk_insert(sa.table("deployment", sa.column("id")), [{"id": 1}])
    if op.get_bind().dialect.name == "postgresql":
        # Its result columns changed: CREATE OR REPLACE cannot change a function's row type.
        op.execute("DROP FUNCTION IF EXISTS claim_tis_v1")
    install(op, CHANGED + NEW, revision)


def downgrade():
    remove(op, NEW)
    # The text 0002 had (sql/<dialect>/previous/0003/), before the tables and columns go: the
    # views never read a dropped column. claim_tis_v1's result columns shrink: on PostgreSQL
    # restore() drops and re-creates it (CREATE OR REPLACE cannot change a function's row type).
    restore(op, CHANGED, revision, down_revision)
    op.drop_table("deployment")
    op.drop_column("dag", "is_draining")
    op.drop_index("task_instance_trigger", table_name="task_instance")
    for column in ("next_kwargs", "next_method", "trigger_id"):
        op.drop_column("task_instance", column)
    op.drop_table("trigger")
