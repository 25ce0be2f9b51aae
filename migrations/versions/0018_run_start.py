"""create_dag_runs_v4 (both dialects): create_dag_runs_v3 whose started runs are stamped with
the moment the decision was made (PostgreSQL: clock_timestamp() inside the statement that
counts and starts; MySQL/MariaDB: UTC_TIMESTAMP(6) read after the count), not the start of the
transaction: a run started in a transaction that began before another scheduler finished a run
of the DAG no longer starts, on paper, before that run ended. The named query
`create_dag_runs` calls v4; v3 stays installed.

Revision ID: 0018
Revises: 0017
Create Date: 2026-11-23
"""
from alembic import op

from engine.procedures import install, remove

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None

NEW = ["create_dag_runs_v4"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
