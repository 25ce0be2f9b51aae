"""preempt_v3 (both dialects): on MySQL/MariaDB preempt_v2 with each victim's worker read by a
consistent read (SELECT ... INTO) instead of `SET v_job = (SELECT ...)`, which MariaDB reads with a
shared lock on the victim's primary record, before the victim's task_instance_worker entry: a lock
cycle with a worker's heartbeat (heartbeat_v3), broken by the server as a deadlock. On PostgreSQL
v3 calls v2. The named query `preempt` calls v3; v1 and v2 stay installed.

Revision ID: 0039
Revises: 0038
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0039"
down_revision = "0038"
branch_labels = None
depends_on = None

NEW = ["preempt_v3"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
