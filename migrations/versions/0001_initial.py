"""Initial schema: tables of DESIGN section 3 and the first version of every procedure.

Revision ID: 0001
Revises:
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql, postgresql

from engine.procedures import install, remove

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

# One type per concept, the same on both dialects.
TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
# PostgreSQL gets plain text (what the functions declare); MySQL needs a length to index.
ID = sa.String(250).with_variant(sa.Text(), "postgresql")  # dag, task, run, pool, queue names
STATE = sa.String(20).with_variant(sa.Text(), "postgresql")
# MySQL's FLOAT is single precision; PostgreSQL's float is double.
FLOAT = sa.Float().with_variant(mysql.DOUBLE(), "mysql", "mariadb")
# MySQL/MariaDB: utf8mb4 with a binary collation, so names compare case-sensitively as in
# PostgreSQL. Ignored by PostgreSQL.
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

# Objects of sql/<dialect>/ this revision installs, in dependency order. (pending_reasons, a
# view of 0001 originally, is installed by 0003: it now reads columns that 0003 adds.)
OBJECTS = [
    "cron_field_v1", "cron_next_v1", "cron_prev_v1",
    "limit_usage", "trigger_dag_v1", "create_dag_runs_v1", "schedule_tis_v1", "queue_tis_v1",
    "claim_tis_v1", "finish_ti_v1", "heartbeat_v1",
    "pool_usage", "queue_depth", "live_jobs", "recent_runs", "running_tis", "recent_ticks",
]


def _mysql_prepare() -> None:
    """MySQL/MariaDB: make utf8mb4_bin the database default, so the temporary tables and the
    parameters and variables of the stored routines (which take the database's collation when
    they are created) compare with the columns without an "illegal mix of collations"."""
    op.execute("ALTER DATABASE CHARACTER SET utf8mb4 COLLATE utf8mb4_bin")


def upgrade():
    is_mysql = op.get_bind().dialect.name != "postgresql"
    if is_mysql:
        _mysql_prepare()
    op.create_table(
        "procedure_version",
        sa.Column("name", ID, primary_key=True),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("file_checksum", sa.String(64), nullable=False),
        sa.Column("db_checksum", sa.String(64), nullable=False),
        sa.Column("revision", sa.String(32), nullable=False),
        # MySQL wants the default's precision to match DATETIME(6)'s.
        sa.Column("installed_at", TS, nullable=False,
                  server_default=sa.text("CURRENT_TIMESTAMP(6)") if is_mysql else sa.func.now()),
        **MYSQL_TABLE,
    )
    op.create_table(
        "scheduler_lock",  # one row per critical section; FOR UPDATE NOWAIT on it
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("last_run_at", TS, nullable=True),
        **MYSQL_TABLE,
    )
    op.bulk_insert(sa.table("scheduler_lock", sa.column("name")),
                   [{"name": "queue_tis"}, {"name": "reset_orphans"}])
    op.create_table(
        "pool",
        sa.Column("name", ID, primary_key=True),
        sa.Column("slots", sa.Integer, nullable=False),
        sa.Column("include_deferred", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("description", sa.Text, nullable=True),
        sa.CheckConstraint("slots >= -1", name="pool_slots_valid"),
        **MYSQL_TABLE,
    )
    op.bulk_insert(sa.table("pool", sa.column("name"), sa.column("slots"), sa.column("description")),
                   [{"name": "default_pool", "slots": 128, "description": "Default pool"}])
    op.create_table(
        "executor",
        sa.Column("name", ID, primary_key=True),
        sa.Column("parallelism", sa.Integer, nullable=True),  # NULL: unlimited
        sa.CheckConstraint("parallelism IS NULL OR parallelism >= 1", name="executor_parallelism_valid"),
        **MYSQL_TABLE,
    )
    op.bulk_insert(sa.table("executor", sa.column("name"), sa.column("parallelism")),
                   [{"name": "default", "parallelism": 32}])
    op.create_table(
        "dag",
        sa.Column("dag_id", ID, primary_key=True),
        sa.Column("fileloc", sa.Text, nullable=False),
        sa.Column("description", sa.Text, nullable=True),
        sa.Column("schedule", sa.String(200), nullable=True),  # 5-field cron (UTC) or NULL: manual only
        sa.Column("start_date", TS, nullable=True),
        sa.Column("catchup", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("max_active_runs", sa.Integer, nullable=True),
        sa.Column("max_active_tasks", sa.Integer, nullable=True),
        sa.Column("is_paused", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("is_active", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.Column("tags", JSON, nullable=True),
        sa.Column("next_dagrun", TS, nullable=True),  # logical date of the next scheduled run
        sa.Column("next_dagrun_create_after", TS, nullable=True),
        sa.Column("serialized", JSON, nullable=True),
        sa.Column("last_synced_at", TS, nullable=True),
        sa.CheckConstraint("max_active_runs IS NULL OR max_active_runs >= 1", name="dag_max_active_runs_valid"),
        sa.CheckConstraint("max_active_tasks IS NULL OR max_active_tasks >= 1", name="dag_max_active_tasks_valid"),
        **MYSQL_TABLE,
    )
    op.create_table(
        "task",
        sa.Column("dag_id", ID, sa.ForeignKey("dag.dag_id", ondelete="CASCADE"), primary_key=True),
        sa.Column("task_id", ID, primary_key=True),
        sa.Column("kind", STATE, nullable=False),
        sa.Column("bash_command", sa.Text, nullable=True),
        sa.Column("env", JSON, nullable=True),
        sa.Column("python_callable", sa.Text, nullable=True),
        sa.Column("op_kwargs", JSON, nullable=True),
        sa.Column("pool", ID, sa.ForeignKey("pool.name"), nullable=False),
        sa.Column("pool_slots", sa.Integer, nullable=False, server_default="1"),
        sa.Column("priority_weight", sa.Integer, nullable=False, server_default="1"),
        sa.Column("weight_rule", STATE, nullable=False, server_default="downstream"),
        sa.Column("queue", ID, nullable=False, server_default="default"),
        sa.Column("executor", ID, sa.ForeignKey("executor.name"), nullable=False, server_default="default"),
        sa.Column("retries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("retry_delay", FLOAT, nullable=False, server_default="300"),
        sa.Column("retry_exponential_backoff", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("max_retry_delay", FLOAT, nullable=True),
        sa.Column("execution_timeout", FLOAT, nullable=True),
        sa.Column("trigger_rule", STATE, nullable=False, server_default="all_success"),
        sa.Column("max_active_tis_per_dag", sa.Integer, nullable=True),
        sa.Column("max_active_tis_per_dagrun", sa.Integer, nullable=True),
        sa.Column("expand", JSON, nullable=True),  # {"arg": [v0, v1, ...]}: one TI per index
        sa.Column("map_count", sa.Integer, nullable=True),  # NULL: not mapped (map_index -1)
        sa.Column("is_active", sa.Boolean, nullable=False, server_default=sa.true()),
        sa.CheckConstraint("pool_slots >= 1", name="task_pool_slots_valid"),
        sa.CheckConstraint("retries >= 0 AND retry_delay >= 0", name="task_retries_valid"),
        sa.CheckConstraint("max_active_tis_per_dag IS NULL OR max_active_tis_per_dag >= 1", name="task_max_per_dag_valid"),
        sa.CheckConstraint("max_active_tis_per_dagrun IS NULL OR max_active_tis_per_dagrun >= 1", name="task_max_per_run_valid"),
        **MYSQL_TABLE,
    )
    op.create_table(
        "task_dependency",
        sa.Column("dag_id", ID, primary_key=True),
        sa.Column("upstream_task_id", ID, primary_key=True),
        sa.Column("task_id", ID, primary_key=True),
        sa.ForeignKeyConstraint(["dag_id", "task_id"], ["task.dag_id", "task.task_id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["dag_id", "upstream_task_id"], ["task.dag_id", "task.task_id"], ondelete="CASCADE"),
        **MYSQL_TABLE,
    )
    op.create_index("task_dependency_upstream", "task_dependency", ["dag_id", "upstream_task_id"])
    op.create_table(
        "job",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("kind", sa.String(20), nullable=False),  # scheduler, worker, triggerer
        sa.Column("hostname", ID, nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("state", STATE, nullable=False, server_default="running"),
        sa.Column("start_date", TS, nullable=False),
        sa.Column("end_date", TS, nullable=True),
        sa.Column("latest_heartbeat", TS, nullable=False),
        **MYSQL_TABLE,
    )
    op.create_index("job_state_kind", "job", ["state", "kind"])
    op.create_table(
        "dag_run",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("dag_id", ID, sa.ForeignKey("dag.dag_id", ondelete="CASCADE"), nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("run_type", STATE, nullable=False),  # scheduled, manual
        sa.Column("state", STATE, nullable=False),  # queued, running, success, failed
        sa.Column("logical_date", TS, nullable=True),
        sa.Column("data_interval_start", TS, nullable=True),
        sa.Column("data_interval_end", TS, nullable=True),
        sa.Column("run_after", TS, nullable=False),
        sa.Column("conf", JSON, nullable=True),
        sa.Column("created_at", TS, nullable=False),
        sa.Column("start_date", TS, nullable=True),
        sa.Column("end_date", TS, nullable=True),
        sa.Column("last_scheduling_decision", TS, nullable=True),
        sa.UniqueConstraint("dag_id", "run_id", name="dag_run_dag_id_run_id"),
        **MYSQL_TABLE,
    )
    op.create_index("dag_run_state_decision", "dag_run", ["state", "last_scheduling_decision"])
    op.create_index("dag_run_dag_state", "dag_run", ["dag_id", "state"])
    op.create_table(
        "task_instance",
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("dag_run_id", sa.BigInteger, sa.ForeignKey("dag_run.id", ondelete="CASCADE"), nullable=False),
        sa.Column("dag_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("task_id", ID, nullable=False),
        sa.Column("map_index", sa.Integer, nullable=False, server_default="-1"),
        sa.Column("state", STATE, nullable=False, server_default="none"),
        sa.Column("try_number", sa.Integer, nullable=False, server_default="0"),
        sa.Column("max_tries", sa.Integer, nullable=False, server_default="0"),
        sa.Column("priority_weight", sa.Integer, nullable=False),
        sa.Column("pool", ID, nullable=False),
        sa.Column("pool_slots", sa.Integer, nullable=False),
        sa.Column("queue", ID, nullable=False),
        sa.Column("executor", ID, nullable=False),
        sa.Column("run_after", TS, nullable=False),  # copy of dag_run.run_after: part of the queue order
        sa.Column("queued_at", TS, nullable=True),
        sa.Column("queued_by_job_id", sa.BigInteger, nullable=True),
        sa.Column("start_date", TS, nullable=True),
        sa.Column("end_date", TS, nullable=True),
        sa.Column("worker_job_id", sa.BigInteger, nullable=True),
        sa.Column("hostname", ID, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("log_path", sa.Text, nullable=True),
        sa.Column("retry_at", TS, nullable=True),
        sa.Column("last_heartbeat_at", TS, nullable=True),
        sa.Column("requeue_count", sa.Integer, nullable=False, server_default="0"),
        sa.Column("state_reason", sa.Text, nullable=True),
        sa.Column("updated_at", TS, nullable=True),
        sa.UniqueConstraint("dag_run_id", "task_id", "map_index", name="task_instance_run_task_map"),
        **MYSQL_TABLE,
    )
    # Per-pool candidate pages of queue_tis (full pools are never read) and pool usage counts.
    op.create_index("task_instance_queue_pool", "task_instance",
                    ["state", "pool", sa.text("priority_weight DESC"), "run_after", "map_index", "id"])
    op.create_index("task_instance_claim", "task_instance", ["state", "queue"])
    op.create_index("task_instance_dag_task_state", "task_instance", ["dag_id", "task_id", "state"])
    op.create_index("task_instance_worker", "task_instance", ["worker_job_id", "state"])
    op.create_table(
        "task_instance_history",  # one row per finished try
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("ti_id", sa.BigInteger, nullable=False),
        sa.Column("dag_id", ID, nullable=False),
        sa.Column("run_id", ID, nullable=False),
        sa.Column("task_id", ID, nullable=False),
        sa.Column("map_index", sa.Integer, nullable=False),
        sa.Column("try_number", sa.Integer, nullable=False),
        sa.Column("state", STATE, nullable=False),
        sa.Column("pool", ID, nullable=False),
        sa.Column("pool_slots", sa.Integer, nullable=False),
        sa.Column("queued_at", TS, nullable=True),
        sa.Column("start_date", TS, nullable=True),
        sa.Column("end_date", TS, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("hostname", ID, nullable=True),
        sa.Column("worker_job_id", sa.BigInteger, nullable=True),
        sa.Column("log_path", sa.Text, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        **MYSQL_TABLE,
    )
    op.create_index("task_instance_history_ti", "task_instance_history", ["ti_id", "try_number"])
    op.create_table(
        "tick_log",  # one row per scheduler pass, for `recent_ticks`
        sa.Column("id", sa.BigInteger, primary_key=True, autoincrement=True),
        sa.Column("job_id", sa.BigInteger, nullable=True),
        sa.Column("hostname", ID, nullable=False),
        sa.Column("started_at", TS, nullable=False),
        sa.Column("duration_ms", FLOAT, nullable=False),
        sa.Column("runs_created", sa.Integer, nullable=False),
        sa.Column("runs_started", sa.Integer, nullable=False),
        sa.Column("tis_scheduled", sa.Integer, nullable=False),
        sa.Column("tis_queued", sa.Integer, nullable=False),
        sa.Column("runs_finished", sa.Integer, nullable=False),
        sa.Column("busy", sa.String(200), nullable=True),  # steps skipped because another scheduler held the lock,
        **MYSQL_TABLE,
    )
    install(op, OBJECTS, revision)


def downgrade():
    remove(op, OBJECTS)
    for table in ["tick_log", "task_instance_history", "task_instance", "dag_run", "job", "task_dependency",
                  "task", "dag", "executor", "pool", "scheduler_lock", "procedure_version"]:
        op.drop_table(table)
