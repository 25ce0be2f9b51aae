"""queue_tis_v12 (both dialects): on PostgreSQL, queue_tis_v11 behind a check of its setting
engine.skip_min (a value that is not a whole number made every v11 call fail; v12 clears it for
the call with a WARNING). On MySQL/MariaDB v12 calls v11. The same arguments, knobs, result, lock
and rule. The named query `queue_tis` calls v12; v1..v11 stay installed.

Revision ID: 0027
Revises: 0026
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v12"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
