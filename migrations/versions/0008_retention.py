"""Retention: clean_v1 deletes old rows in bounded batches (`engine db clean`, and the scheduler
at most every clean_interval), keeping anything a live run or a live job still needs.

- clean_v1 (both dialects): one batch per table per call, lock scheduler_lock('db_clean');
- the lock row db_clean (its last_run_at: when the cleanup last caught up);
- the view metrics: every count the database knows, for `engine metrics` and the Prometheus
  endpoint (Airflow's metric names where one exists);
- the view pending_reasons changed in place (its previous text is kept in
  sql/<dialect>/previous/0008/): a TI of a pool of 0 slots waits with reason 'pool closed';
- job.queues: the queues a worker claims from (comma-separated; NULL for other jobs), so
  `engine status --check` can tell a queue with queued work and no live worker;
- indexes on the columns the cutoff reads, so each batch reads only what it deletes:
  tick_log(started_at), task_instance_history(end_date), dag_run(state, end_date),
  dag_run(dag_id, id) (the newest run of a DAG is kept), job(state, end_date).

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op

from engine.procedures import install, remove, restore

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None

CHANGED = ["pending_reasons"]  # new reason 'pool closed' (a pool of 0 slots holds its work)
NEW = ["clean_v1", "metrics", "set_job_queues_v1"]
INDEXES = [
    ("tick_log_started_at", "tick_log", ["started_at"]),
    ("task_instance_history_end_date", "task_instance_history", ["end_date"]),
    ("dag_run_state_end_date", "dag_run", ["state", "end_date"]),
    ("dag_run_dag_id_id", "dag_run", ["dag_id", "id"]),
    ("job_state_end_date", "job", ["state", "end_date"]),
]


def upgrade():
    op.bulk_insert(sa.table("scheduler_lock", sa.column("name")), [{"name": "db_clean"}])
    op.add_column("job", sa.Column("queues", sa.Text, nullable=True))
    for name, table, columns in INDEXES:
        op.create_index(name, table, columns)
    install(op, CHANGED + NEW, revision)


def downgrade():
    remove(op, NEW)
    restore(op, CHANGED, revision, down_revision)
    for name, table, _ in reversed(INDEXES):
        op.drop_index(name, table_name=table)
    op.drop_column("job", "queues")
    op.execute("DELETE FROM scheduler_lock WHERE name = 'db_clean'")
