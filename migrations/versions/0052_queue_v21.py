"""queue_tis_v21 (both dialects). PostgreSQL: queue_tis_v20 whose first batch starts with pages as
long as the session's last call needed (the custom setting engine.qt21_factor, kept for the
session), instead of at page_factor every call (docs/critical-section.md, "queue_tis_v21").
MySQL/MariaDB: a call of queue_tis_v20. The same arguments, knobs, result, lock and rule. The
named query `queue_tis` calls v21; v1..v20 stay installed.

Revision ID: 0052
Revises: 0051
Create Date: 2026-12-06
"""
from alembic import op

from engine.procedures import install, remove

revision = "0052"
down_revision = "0051"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v21"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
