"""queue_tis_v14 (both dialects): on PostgreSQL, queue_tis_v13's checks with the one for transaction
ids from another cluster read as max(sched_xid) at the end of an index (v13's EXISTS was planned
as a sequential scan of task_instance), then queue_tis_v11. On MySQL/MariaDB v14 calls v9. The same
arguments, knobs, result, lock and rule. The named query `queue_tis` calls v14; v1..v13 stay
installed.

Revision ID: 0029
Revises: 0028
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0029"
down_revision = "0028"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v14"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
