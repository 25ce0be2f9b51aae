"""queue_tis_v27 (both dialects). MySQL/MariaDB: with aging off a call of queue_tis_v26; with aging
on, v9's walk (which v26 handed such calls to) folding with fold_usage_v2, so that this path too
waits for no writer's uncommitted usage_delta row (docs/critical-section.md, "queue_tis_v27").
PostgreSQL: a call of queue_tis_v25, as v26 is. The same arguments, knobs, result, lock and
rule. The named query `queue_tis` calls v27; v1..v26 stay installed.

Revision ID: 0059
Revises: 0058
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, remove

revision = "0059"
down_revision = "0058"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v27"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
