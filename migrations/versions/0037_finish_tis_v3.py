"""finish_tis_v3 (both dialects): on MySQL/MariaDB a worker's report of many ended tries is decided
for the whole batch in a fixed number of statements (the reported TIs locked by one cursor in id
order, then one INSERT ... SELECT of the decisions, one history INSERT, one UPDATE, one
task_result upsert and one DELETE), instead of one finish_ti_v3 call per try, as PostgreSQL's
finish_tis_v2 does. The same arguments, result and meaning as v1. On PostgreSQL v3 calls v2. The
named query `finish_tis` calls v3; v1 and v2 stay installed.

Revision ID: 0037
Revises: 0036
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0037"
down_revision = "0036"
branch_labels = None
depends_on = None

NEW = ["finish_tis_v3"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
