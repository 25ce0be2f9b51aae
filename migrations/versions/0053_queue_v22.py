"""queue_tis_v22 (both dialects). PostgreSQL: queue_tis_v21 that reads a pool's refused head for
the reasons of its TIs only where the head is long enough for a skip entry (engine.skip_min TIs),
instead of reading every head and then dropping the short ones (docs/critical-section.md,
"queue_tis_v22"). MySQL/MariaDB: a call of queue_tis_v21. The same arguments, knobs, result, lock
and rule. The named query `queue_tis` calls v22; v1..v21 stay installed.

Revision ID: 0053
Revises: 0052
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, remove

revision = "0053"
down_revision = "0052"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v22"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
