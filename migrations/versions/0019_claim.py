"""claim_tis_v3 (both dialects) and the index it reads:

- index task_instance_claim widened from (state, queue) to (state, queue, priority_weight DESC,
  queued_at, id): a claim reads each of its queues in claim order and stops after `limit` TIs
  (v2 read and sorted every queued TI of the worker's queues at every claim). It keeps its name
  and serves every query the narrow one served (the same leading columns). Building it locks
  task_instance against writes for the build (seconds per million rows): upgrade while the
  services are stopped, as for any revision;
- claim_tis_v3: claim_tis_v2 reading that index per queue (same arguments, result, lock); the
  named query `claim_tis` calls v3; v2 stays installed (it reads the wider index as before).

Revision ID: 0019
Revises: 0018
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op

from engine.procedures import install, remove

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

NEW = ["claim_tis_v3"]


def upgrade():
    op.drop_index("task_instance_claim", table_name="task_instance")
    op.create_index("task_instance_claim", "task_instance",
                    ["state", "queue", sa.text("priority_weight DESC"), "queued_at", "id"])
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    op.drop_index("task_instance_claim", table_name="task_instance")
    op.create_index("task_instance_claim", "task_instance", ["state", "queue"])
