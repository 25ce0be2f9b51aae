"""dispatch_tis_v2 (both dialects): dispatch_tis_v1 reading the claim index (state, queue,
executor, ...; revision 0041) queue by queue, so a dispatcher's pass reads its own executor's
queued TIs only, not every queued TI of every executor (v1: a pass read a database-queue
backlog whole). The named query `dispatch_tis` calls v2; v1 stays installed. Changes nothing in
place.

Revision ID: 0042
Revises: 0041
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0042"
down_revision = "0041"
branch_labels = None
depends_on = None

NEW = ["dispatch_tis_v2"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
