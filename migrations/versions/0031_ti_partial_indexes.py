"""PostgreSQL: the indexes task_instance_trigger and task_instance_worker hold only the rows whose
key is set.

- task_instance_trigger (trigger_id) WHERE trigger_id IS NOT NULL;
- task_instance_worker (worker_job_id, state) WHERE worker_job_id IS NOT NULL.

Every query that reads them asks for one trigger or one worker (`trigger_id = ?`,
`worker_job_id = ?`), which implies the predicate, so each keeps its plan. What changes is the
write: a TI inserted, or moved to `scheduled` or `queued` (no worker, no trigger yet), no longer
writes an entry into either index (a state change is never a HOT update: `state` is indexed), and
neither index keeps an entry per TI that never had a worker or a trigger. Measured on 100,000
scheduled TIs: the UPDATE of 512 TIs to `queued` that ends a queue_tis call, 10 % cheaper
(docs/critical-section.md, "Indexes written per TI").

MySQL/MariaDB: nothing (InnoDB has no partial index). No procedure changes.

Revision ID: 0031
Revises: 0030
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

INDEXES = {
    "task_instance_trigger": (["trigger_id"], "trigger_id IS NOT NULL"),
    "task_instance_worker": (["worker_job_id", "state"], "worker_job_id IS NOT NULL"),
}


def is_postgresql() -> bool:
    return op.get_bind().dialect.name == "postgresql"


def upgrade():
    if not is_postgresql():
        return
    for name, (columns, where) in INDEXES.items():
        op.drop_index(name, table_name="task_instance")
        op.create_index(name, "task_instance", columns, postgresql_where=sa.text(where))


def downgrade():
    if not is_postgresql():
        return
    for name, (columns, _where) in INDEXES.items():
        op.drop_index(name, table_name="task_instance")
        op.create_index(name, "task_instance", columns)
