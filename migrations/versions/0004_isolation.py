"""One bad value never stops the deployment: where a DAG's failure is recorded, and the
second version of the procedures that used to fail for everyone.

- dag.error_step / error / error_at: what failed inside the database for this DAG (the step
  that failed, its one-line message, when), so the pass goes on for every other DAG; shown by
  `engine dags list`, `engine status` and the view dag_errors. The step that recorded it
  clears it when it next succeeds for that DAG; a sync of the DAG clears it too.
- tick_log.errors: steps of a pass that failed as a whole (none should), with their message.
- Rows an older version could write but Python cannot read (next_dagrun past year 9999,
  from a start_date like 9999-12-31) are reset, so `engine dags list` works again.

The released _v1 objects stay installed and unchanged (an old scheduler keeps working during
a rolling upgrade). NEW lists the objects this revision adds, in dependency order; CHANGED the
views it changes in place, whose previous text sql/<dialect>/previous/0004/ keeps so that the
downgrade puts them back as 0003 had them.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from engine.procedures import install, remove, restore

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")

CHANGED = ["limit_usage", "pending_reasons", "recent_runs", "recent_ticks"]
NEW = [
    "dag_errors",
    # No value a DAG, task or TI holds makes these fail for everyone.
    "cron_next_v2", "log_path_part_v1", "trigger_dag_v2", "create_dag_runs_v2", "claim_tis_v2",
    "finish_ti_v2", "reset_orphans_v2", "defer_ti_v2", "fire_trigger_v2",
    "claim_triggers_v2", "requeue_stuck_v2",
    # Partitions keyed by ids, never joined names; TIs nobody can run are removed or wait.
    "queue_tis_v2", "schedule_tis_v2",
]


def upgrade():
    op.add_column("dag", sa.Column("error_step", sa.String(64), nullable=True))
    op.add_column("dag", sa.Column("error", sa.Text, nullable=True))
    op.add_column("dag", sa.Column("error_at", TS, nullable=True))
    op.add_column("tick_log", sa.Column("errors", sa.Text, nullable=True))
    op.execute("UPDATE dag SET next_dagrun = NULL, next_dagrun_create_after = NULL "
               "WHERE next_dagrun >= '9999-01-01' OR next_dagrun_create_after >= '9999-01-01'")
    install(op, CHANGED + NEW, revision)


def downgrade():
    remove(op, NEW)
    restore(op, CHANGED, revision, down_revision)
    op.drop_column("tick_log", "errors")
    for column in ("error_at", "error", "error_step"):
        op.drop_column("dag", column)
