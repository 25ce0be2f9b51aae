"""`engine status` and the metrics view keep their cost when the backlog is large.

- view pending_counts (new, both dialects): how many scheduled TIs wait for each reason, by pool:
  pending_reasons' counts, read per group of TIs that share what a reason depends on instead of
  per TI (1,000,000 scheduled TIs: PostgreSQL 15 0.55 s against 2.4 s, MariaDB 10.11 6 s
  against 114 s);
- view metrics changed in place (previous text in sql/<dialect>/previous/0061/): it read the
  scheduled TIs six times, three of them per TI through pending_reasons (PostgreSQL 8.7 s with
  JIT off, MariaDB 338 s at 1,000,000); now twice, once through pending_counts;
- the named queries `status_pending` and `metrics` read pending_counts and (PostgreSQL) turn JIT
  off for their transaction (docs/operations.md, "Metrics").

Downgrade: metrics gets its previous text back, then pending_counts goes.

Revision ID: 0061
Revises: 0060
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, remove, restore

revision = "0061"
down_revision = "0060"
branch_labels = None
depends_on = None

NEW = ["pending_counts"]
CHANGED = ["metrics"]


def upgrade():
    install(op, NEW + CHANGED, revision)


def downgrade():
    restore(op, CHANGED, revision, down_revision)
    remove(op, NEW)
