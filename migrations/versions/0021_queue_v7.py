"""queue_tis_v7 (both dialects): queue_tis_v6 after one check, so that an idle call costs
nothing: with no `scheduled` TI and no pool_reservation row there is nothing to decide, and v7
returns no row without the lock, the usage fold, or v6's per-session set-up (scratch tables,
~40 statements planned: 65-85 ms on the first call of a new connection, which every `engine
tick` is). Otherwise it calls v6. The named query `queue_tis` calls v7; v1..v6 stay installed.

Revision ID: 0021
Revises: 0020
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v7"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
