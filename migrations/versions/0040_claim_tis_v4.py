"""claim_tis_v4 (both dialects): claim_tis_v3 entered only when one of the worker's queues holds a
queued TI. An idle worker's poll returns at once after one read of the claim index, instead of
planning and running v3's UPDATE (PostgreSQL) or its dozen statements (MySQL/MariaDB). The named
query `claim_tis` calls v4; v1-v3 stay installed.

Revision ID: 0040
Revises: 0039
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0040"
down_revision = "0039"
branch_labels = None
depends_on = None

NEW = ["claim_tis_v4"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
