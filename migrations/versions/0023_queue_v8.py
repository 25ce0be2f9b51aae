"""queue_tis_v8 (both dialects): on PostgreSQL, queue_tis_v7 with one change to the walk: a
batch ends at a full page (a pool with more candidates than its page holds) only when that
page's pool can still take a TI there; a pool already full by then cannot queue the TIs beyond
its page, so the walk goes on (v6 ended every batch at the earliest full page). The same
arguments, knobs, result, lock and rule. On MySQL/MariaDB v8 calls v7. The named query
`queue_tis` calls v8; v1..v7 stay installed.

Revision ID: 0023
Revises: 0022
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0023"
down_revision = "0022"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v8"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
