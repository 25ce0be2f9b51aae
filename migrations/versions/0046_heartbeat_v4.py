"""MySQL/MariaDB: a worker's heartbeat locks its restarting and preempting TIs as it picks them
(heartbeat_v4). heartbeat_v3 picked them with plain reads, then wrote their history and new state
from that pick: an operator's change of a preempting TI committed meanwhile (mark success, clear,
kill, or a Defer of the preempted try) was overwritten, and the TI ran again or lost its trigger
(docs/procedures.md, heartbeat_v4). The named query worker_heartbeat calls v4 there.

PostgreSQL: nothing (its heartbeat_v3 picks them FOR UPDATE, which re-checks their state).
Downgrade: heartbeat_v4 goes.

Revision ID: 0046
Revises: 0045
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0046"
down_revision = "0045"
branch_labels = None
depends_on = None

NEW = ["heartbeat_v4"]


def upgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    install(op, NEW, revision)


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    remove(op, NEW)
