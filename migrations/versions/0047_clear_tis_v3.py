"""PostgreSQL: `engine tasks clear` reads whether a TI's worker lives after the TI is locked
(clear_tis_v3). clear_tis_v2 read it in the cursor that locks the TIs, from that cursor's
snapshot: a worker that registered and started a TI after it (while the clear waited for an
earlier TI's row) read as dead, and its running TI went to `none` instead of `restarting`, so a
second try could start beside the first (docs/procedures.md, clear_tis_v3). The named query
clear_tis calls v3 there.

MySQL/MariaDB: nothing (its clear_tis_v2 locks first and reads the jobs in a later statement).
Downgrade: clear_tis_v3 goes.

Revision ID: 0047
Revises: 0046
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0047"
down_revision = "0046"
branch_labels = None
depends_on = None

NEW = ["clear_tis_v3"]


def upgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    install(op, NEW, revision)


def downgrade():
    if op.get_bind().dialect.name != "postgresql":
        return
    remove(op, NEW)
