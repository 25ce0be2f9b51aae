"""queue_tis_v16 (both dialects): on MySQL/MariaDB, queue_tis_v15 copying only the full partitions'
counters, pages sized by their pool's share, the keyset reads through one index and a page's
first and last rows read by the order they were written in (docs/critical-section.md,
"queue_tis_v16"); on PostgreSQL v16 calls v15. The same arguments, knobs, result, lock and rule.
The named query `queue_tis` calls v16; v1..v15 stay installed.

Revision ID: 0032
Revises: 0031
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0032"
down_revision = "0031"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v16"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
