"""Many schedulers, workers and crashes: orphan cleanup, stuck queue entries, graceful release.

No table changes: the job registry, the scheduler_lock row 'reset_orphans' (its last_run_at
is the stamp), task_instance.requeue_count and last_heartbeat_at come with 0001.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-23
"""
from alembic import op

from engine.procedures import install, remove

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

# Objects of sql/<dialect>/ this revision installs, in dependency order (reset_orphans_v1
# calls finish_ti_v1, installed by 0001).
OBJECTS = ["reset_orphans_v1", "requeue_stuck_v1", "release_ti_v1"]


def upgrade():
    install(op, OBJECTS, revision)


def downgrade():
    remove(op, OBJECTS)
