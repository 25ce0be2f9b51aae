"""queue_tis_v10 (both dialects): on PostgreSQL, queue_tis_v8 with 4 page rows of slack per pool
instead of 8 and its full-partition hints reading a run's DAG through dag_run (not from the
counter's dag_id). On MySQL/MariaDB v10 calls v9. The same arguments, knobs, result, lock and
rule. The named query `queue_tis` calls v10; v1..v9 stay installed.

Revision ID: 0025
Revises: 0024
Create Date: 2026-11-24
"""
from alembic import op

from engine.procedures import install, remove

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v10"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
