"""The executor in the claim index, and claim_tis_v5 (both dialects).

- index task_instance_claim widened from (state, queue, priority_weight DESC, queued_at, id) to
  (state, queue, executor, priority_weight DESC, queued_at, id): a claim of the database-queue
  executor (`executor = 'default'`) reads its queue from its first 'default' TI, instead of
  reading past every queued TI of another executor in that queue (a Celery backlog); the same
  for pending_work_v1's count. It keeps its name; every query that read the previous one keeps
  its leading columns (state, queue). Building it locks task_instance against writes for the
  build (seconds per million rows): upgrade while the services are stopped, as for any revision;
- claim_tis_v5: claim_tis_v4 whose question (is anything queued for me?) names the executor too,
  so a worker whose queues hold only other executors' TIs returns at once. The named query
  `claim_tis` calls v5; v1-v4 stay installed.

Revision ID: 0041
Revises: 0040
Create Date: 2026-11-25
"""
import sqlalchemy as sa
from alembic import op

from engine.procedures import install, remove

revision = "0041"
down_revision = "0040"
branch_labels = None
depends_on = None

NEW = ["claim_tis_v5"]
ORDER = [sa.text("priority_weight DESC"), "queued_at", "id"]


def upgrade():
    op.drop_index("task_instance_claim", table_name="task_instance")
    op.create_index("task_instance_claim", "task_instance", ["state", "queue", "executor", *ORDER])
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    op.drop_index("task_instance_claim", table_name="task_instance")
    op.create_index("task_instance_claim", "task_instance", ["state", "queue", *ORDER])
