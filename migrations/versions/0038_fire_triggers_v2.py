"""fire_triggers_v2 (both dialects): the tries a batch of fired triggers ends (errors and final
events) are decided for the whole batch at once instead of one finish_ti_v3 call per try: on
PostgreSQL through one finish_tis_v2 call, on MySQL/MariaDB with a fixed number of set-based
statements (as finish_tis_v3). The same arguments, result and meaning as v1. The named query
`fire_triggers` calls v2; v1 stays installed.

Revision ID: 0038
Revises: 0037
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0038"
down_revision = "0037"
branch_labels = None
depends_on = None

NEW = ["fire_triggers_v2"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
