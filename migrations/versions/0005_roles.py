"""Least privilege: what a worker or a triggerer does in the database is a procedure, so a role
that may only EXECUTE them can run one (engine db roles, docs/operations.md).

register_job_v1, finish_job_v1, pending_work_v1, owned_triggers_v1 and release_triggers_v1 do
what plain statements did before; the named queries call them now. Nothing else changes.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-23
"""
from alembic import op

from engine.procedures import install, remove

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

NEW = ["register_job_v1", "finish_job_v1", "pending_work_v1", "owned_triggers_v1", "release_triggers_v1"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
