"""MySQL/MariaDB: the views pending_counts and pending_reasons read the pool, task and executor
limits by key instead of by a block nested loop (changed in place; previous text in
sql/mysql/previous/0062/).

MariaDB builds a key on a materialized derived table only when it holds at most 1,000 bytes, and
a name (VARCHAR(250) utf8mb4) takes 1,003 as a key: both views' joins on a name to limit_usage
compared every group (or TI) with every limit_usage row. They now join grouped derived tables on
the names' first 100 characters and compare the whole names beside the key: pending_counts
(`engine status`, the metrics view, so every scrape) 2.1 -> 0.75 s on a world of 50,000 scheduled
TIs and 1,073 running, pending_reasons counted by reason 4.4 -> 1.35 s. Same rows.

PostgreSQL: nothing (its hash joins never had the problem).
Downgrade: both views get their previous text back.

Revision ID: 0062
Revises: 0061
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, restore

revision = "0062"
down_revision = "0061"
branch_labels = None
depends_on = None

CHANGED = ["pending_counts", "pending_reasons"]


def upgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    install(op, CHANGED, revision)


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    restore(op, CHANGED, revision, down_revision)
