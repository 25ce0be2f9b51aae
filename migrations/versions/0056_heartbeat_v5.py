"""MySQL/MariaDB: a worker's heartbeat moves to `none` only the restarting TIs it wrote a
`restarted` row for (heartbeat_v5). heartbeat_v4 wrote the rows from one locking read and moved
the TIs by a second read: a TI cleared (preempting -> restarting) in between went to `none`
without its row (docs/procedures.md, heartbeat_v5). One locking read now picks the job's stopped
restarting and preempting TIs, with their states, into a table that every later statement
writes from. The named query worker_heartbeat calls v5 there; v4 stays installed.

PostgreSQL: nothing (its heartbeat_v3 moves a restarting TI and writes its row in one statement).
Downgrade: heartbeat_v5 goes.

Revision ID: 0056
Revises: 0055
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, remove

revision = "0056"
down_revision = "0055"
branch_labels = None
depends_on = None

NEW = ["heartbeat_v5"]


def upgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    install(op, NEW, revision)


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    remove(op, NEW)
