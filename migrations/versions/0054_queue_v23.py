"""queue_tis_v23 (both dialects). PostgreSQL: queue_tis_v22 that counts a batch's check points
(how many candidates come before each, its pool's partition number) over the candidates instead
of the whole page (docs/critical-section.md, "queue_tis_v23"). MySQL/MariaDB: a call of
queue_tis_v22. The same arguments, knobs, result, lock and rule. The named query `queue_tis`
calls v23; v1..v22 stay installed.

Revision ID: 0054
Revises: 0053
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, remove

revision = "0054"
down_revision = "0053"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v23"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
