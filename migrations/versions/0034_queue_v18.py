"""queue_tis_v18 (both dialects): on MySQL/MariaDB, queue_tis_v17 taking a pool's gate row
(queue_skip_gate, FOR UPDATE SKIP LOCKED) before it reads the refused TIs of a new skip entry
again, not after: a writer that committed in between was hidden by the entry (docs/critical-section.md,
"queue_tis_v18"); on PostgreSQL v18 calls v17. The same arguments, knobs, result, lock and rule.
The named query `queue_tis` calls v18; v1..v17 stay installed.

Revision ID: 0034
Revises: 0033
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0034"
down_revision = "0033"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v18"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
