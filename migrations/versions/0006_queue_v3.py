"""queue_tis_v3: the critical section's cost follows what a call decides (issue 11).

Same rule, lock, parameters and results as queue_tis_v2; it no longer reads the whole view
limit_usage at every call (what is used is counted from the active TIs only, caps are read for
the partitions a batch touches), decides a batch with one greedy walk instead of rounds of
window passes, and reads deeper pages when blocked candidates ate a page. docs/critical-section.md.

queue_tis_v1 and queue_tis_v2 stay installed (schedulers of earlier releases keep working during
a rolling upgrade; all three take the same lock row). Nothing else changes: no table, column or
index, no other procedure.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-23
"""
from alembic import op

from engine.procedures import install, remove

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v3"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
