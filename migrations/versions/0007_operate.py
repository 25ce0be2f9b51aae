"""Operating runs and tasks from the command line (issue 10, section 1).

- state_change: one row per state an operator changed (a TI or a run): when, the action
  (clear, mark_success, mark_failed, kill, cancel, restarted), from and to which state, the
  reason. `task_instance_history` keeps its rule (one row per finished try): a try an operator
  ends while it runs or is deferred gets its row there too.
- dag_run.state_reason: why an operator ended or reopened a run (NULL for the scheduler's
  decisions).
- TI state `restarting` (Airflow's name): a running TI that `engine tasks clear` cleared; its
  worker stops the try (heartbeat_v2) and the TI then goes back to `none` for a new try.
- Procedures: clear_tis_v1, set_ti_state_v1 (tasks mark / kill), set_run_state_v1 (runs mark /
  cancel), heartbeat_v2 (a worker learns which of its tries to stop), trigger_dag_v3 (a
  logical date), backfill_v1; views run_overview and ti_overview (what `engine runs` and
  `engine tasks` print).

The released objects stay installed and unchanged (rolling upgrade: an old worker keeps calling
heartbeat_v1 and never stops a try on request; its tries still end as recorded).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from engine.procedures import install, remove

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
ID = sa.String(250).with_variant(sa.Text(), "postgresql")
STATE = sa.String(20).with_variant(sa.Text(), "postgresql")
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

NEW = [
    "run_overview", "ti_overview",
    "heartbeat_v2", "clear_tis_v1", "set_ti_state_v1", "set_run_state_v1", "trigger_dag_v3", "backfill_v1",
]


def upgrade():
    op.create_table(
        "state_change",  # one row per state an operator changed
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("at", TS, nullable=False),
        sa.Column("action", STATE, nullable=False),
        sa.Column("dag_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("task_id", ID, nullable=True),     # NULL: the run itself
        sa.Column("map_index", sa.Integer, nullable=True),
        sa.Column("ti_id", sa.BigInteger, nullable=True),
        sa.Column("try_number", sa.Integer, nullable=True),
        sa.Column("from_state", STATE, nullable=False),
        sa.Column("to_state", STATE, nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        **MYSQL_TABLE,
    )
    op.create_index("state_change_run", "state_change", ["dag_id", "run_id", "id"])
    op.add_column("dag_run", sa.Column("state_reason", sa.Text, nullable=True))
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    # TIs a clear left stopping go back to `none`: revision 0006 knows no `restarting`.
    op.execute("UPDATE task_instance SET state = 'none', worker_job_id = NULL, hostname = NULL "
               "WHERE state = 'restarting'")
    op.drop_column("dag_run", "state_reason")
    op.drop_index("state_change_run", table_name="state_change")
    op.drop_table("state_change")
