"""queue_tis_v19 (both dialects): the prune reads each group's limits once (the page rows of one
pool, run, task, width and executor) and drops a row with as many members of its group ahead of
it as the group can take: greedy queues a prefix of each group (docs/critical-section.md,
"queue_tis_v19"). PostgreSQL: queue_tis_v14's checks and queue_tis_v11's walk in one function;
MySQL/MariaDB: queue_tis_v18 with that prune. The same arguments, knobs, result, lock and rule.
The named query `queue_tis` calls v19; v1..v18 stay installed.

Revision ID: 0050
Revises: 0049
Create Date: 2026-12-06
"""
from alembic import op

from engine.procedures import install, remove

revision = "0050"
down_revision = "0049"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v19"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
