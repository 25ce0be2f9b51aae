"""queue_tis_v25 (both dialects). PostgreSQL: queue_tis_v23 called with `enable_mergejoin` off for
the call: its scratch tables carry no statistics, and the planner's guess made step 3b (each page
row joined to its group) a merge join that sorts every page row by five keys; a hash join probes
the batch's groups instead (docs/critical-section.md, "queue_tis_v25"). MySQL/MariaDB: a call of
queue_tis_v24. The same arguments, knobs, result, lock and rule. The named query `queue_tis`
calls v25; v1..v24 stay installed.

Revision ID: 0057
Revises: 0056
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, remove

revision = "0057"
down_revision = "0056"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v25"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
