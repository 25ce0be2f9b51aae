"""queue_tis_v24 (both dialects). MySQL/MariaDB: queue_tis_v19 with its small scratch tables (the
usage it copies, a batch's groups and candidates, verdicts, accepted ids) in MEMORY instead of
Aria, and a batch's partitions numbered once per group, as PostgreSQL's v20 numbers them
(docs/critical-section.md, "queue_tis_v24"). PostgreSQL: a call of queue_tis_v23. The same
arguments, knobs, result, lock and rule. The named query `queue_tis` calls v24; v1..v23 stay
installed.

Revision ID: 0055
Revises: 0054
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, remove

revision = "0055"
down_revision = "0054"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v24"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
