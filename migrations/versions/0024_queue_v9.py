"""queue_tis_v9 (both dialects): on MySQL/MariaDB, queue_tis_v8 in one procedure with usage read
from the counters (v4 summed the active TIs at every call; the counters were already folded at
every call since v6). On PostgreSQL v9 calls v8. The same arguments, knobs, result, lock and rule.
The named query `queue_tis` calls v9; v1..v8 stay installed.

Revision ID: 0024
Revises: 0023
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0024"
down_revision = "0023"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v9"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
