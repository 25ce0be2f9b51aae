"""finish_tis_v2 (both dialects): on PostgreSQL a worker's report of many ended tries is decided
for the whole batch in a few statements (every reported TI locked in id order by one statement,
then one UPDATE, one history INSERT and one task_result write), instead of one finish_ti_v3
call per try; the usage trigger fires once per batch instead of once per try. The same
arguments, result and meaning as v1. On MySQL/MariaDB v2 calls v1. The named query
`finish_tis` calls v2; v1 stays installed.

Revision ID: 0022
Revises: 0021
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0022"
down_revision = "0021"
branch_labels = None
depends_on = None

NEW = ["finish_tis_v2"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
