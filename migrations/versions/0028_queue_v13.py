"""queue_tis_v13 (both dialects): on PostgreSQL, queue_tis_v11 behind v12's check of engine.skip_min
and a check for transaction ids from another cluster (a restored dump): skip entries are dropped
and scheduled TIs stamped again when an id at or past the current snapshot's xmax shows up. On
MySQL/MariaDB v13 calls v9 (v10-v12 are v9 there). The same arguments, knobs, result, lock and
rule. The named query `queue_tis` calls v13; v1..v12 stay installed.

Revision ID: 0028
Revises: 0027
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0028"
down_revision = "0027"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v13"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
