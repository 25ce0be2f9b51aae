"""Worker throughput (issue 12, docs/latency.md).

- finish_tis_v1 (both dialects): many tries' outcomes in one call, each ended through
  finish_ti_v3 (same meaning, results and retries included), fenced per try by TI id and try
  number, in TI id order; the named statement `finish_tis` sends it with one NOTIFY. The worker
  reports every plain finish that ended since its last report in one such call.

Revision ID: 0015
Revises: 0014
Create Date: 2026-11-23
"""
from alembic import op

from engine.procedures import install, remove

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

NEW = ["finish_tis_v1"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
