"""Orphans that were being stopped: reset_orphans_v3.

- reset_orphans_v3 (both dialects): reset_orphans_v2 plus a fourth step: a TI in `restarting`
  (cleared while running) or `preempting` (a preemption victim) whose worker job is gone ends
  as heartbeat_v3 ends it when a live worker stops listing it (`none` for a new try;
  `scheduled` with max_tries + 1 and a 'preempted' history row). Under v2 such TIs stayed
  where they were for ever. Same arguments and result as v2; reset_orphans_v2 stays installed.

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-23
"""
from alembic import op

from engine.procedures import install, remove

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

NEW = ["reset_orphans_v3"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
