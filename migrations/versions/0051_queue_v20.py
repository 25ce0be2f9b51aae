"""queue_tis_v20 (both dialects). PostgreSQL: queue_tis_v19 with a batch's partitions numbered once
per group (the groups in a scratch table with their free capacity, the candidates joined to
them) instead of once per candidate row (docs/critical-section.md, "queue_tis_v20").
MySQL/MariaDB: a call of queue_tis_v19 (the same change measured slower there, see the file).
The same arguments, knobs, result, lock and rule. The named query `queue_tis` calls v20; v1..v19
stay installed.

Revision ID: 0051
Revises: 0050
Create Date: 2026-12-06
"""
from alembic import op

from engine.procedures import install, remove

revision = "0051"
down_revision = "0050"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v20"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
