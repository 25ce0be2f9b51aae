"""The lock row scheduler_lock('definitions'): `engine dags sync`, `engine pools set` and `engine
pools delete` take it first (the named query lock_definitions), so each one's checks and writes
are one step against the others. Before, each checked by plain reads and wrote after: two syncs of
two files defining one new DAG id both passed the owner check and the second took the DAG over
without --force; a sync whose file no longer defined a DAG deactivated it although another sync
had just moved it to its own file (MySQL/MariaDB); a sync checked a task's width against its
pool while `pools set` shrank the pool (a task wider than its pool, whose TIs never run); two
first syncs of a time zone merged their offset lists (PostgreSQL); a pool deleted while a sync
added its first task failed with the raw foreign-key error.

Downgrade: the row goes.

Revision ID: 0049
Revises: 0048
Create Date: 2026-11-25
"""
import sqlalchemy as sa
from alembic import op

revision = "0049"
down_revision = "0048"
branch_labels = None
depends_on = None


def upgrade():
    op.bulk_insert(sa.table("scheduler_lock", sa.column("name")), [{"name": "definitions"}])


def downgrade():
    op.execute("DELETE FROM scheduler_lock WHERE name = 'definitions'")
