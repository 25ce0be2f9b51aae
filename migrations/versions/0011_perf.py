"""Statistics that keep up with a surge (issue 11 item 6): analyze_stale_v1 (both dialects), which
the scheduler calls in every pass before schedule_tis, ANALYZEs task_instance, dag_run,
task_instance_history and trigger when the rows changed since their last ANALYZE reach a share
of the table (setting analyze_fraction); lock row scheduler_lock('analyze_stale'). No table,
column, index or other procedure changes.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op

from engine.procedures import install, remove

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

NEW = ["analyze_stale_v1"]


def upgrade():
    op.bulk_insert(sa.table("scheduler_lock", sa.column("name")), [{"name": "analyze_stale"}])
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    op.execute("DELETE FROM scheduler_lock WHERE name = 'analyze_stale'")
