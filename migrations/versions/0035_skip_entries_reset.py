"""MySQL/MariaDB: the skip entries made before revision 0034 are dropped, so the next call of
queue_tis_v18 reads every pool in full and makes them again. queue_tis_v15 to v17 could make a new
entry that covered a TI whose writer committed while the call re-read the entry's TIs (the TI had
no queue_skip_log row, and the entry hid it for as long as it held; docs/critical-section.md,
"queue_tis_v18"). Dropping entries is always safe (queue_skip_part goes with them; the log rows of
pools without an entry are deleted by the next call). PostgreSQL: nothing (its entries compare
transaction ids and never had the window). Downgrade: nothing to put back.

Revision ID: 0035
Revises: 0034
Create Date: 2026-11-24
"""
from alembic import op

revision = "0035"
down_revision = "0034"
branch_labels = None
depends_on = None


def upgrade():
    if op.get_bind().dialect.name != "postgresql":
        op.execute("DELETE FROM queue_skip_part")
        op.execute("DELETE FROM queue_skip")


def downgrade():
    pass
