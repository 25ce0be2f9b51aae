"""queue_tis_v5 (issue 11, docs/critical-section.md):

- PostgreSQL: queue_tis_v4 whose scratch tables keep their rows at commit (ON COMMIT PRESERVE
  ROWS) and are emptied by each call (TRUNCATE past 2 MB): v4's ON COMMIT DELETE ROWS tables
  were truncated at every commit, which invalidated the call's cached plans; and a pool's page
  sized by its share of what is left to queue. Same arguments, knobs, result, lock and rule;
- MySQL/MariaDB: queue_tis_v5 calls queue_tis_v4 (so both dialects name the same versions);
- the named query `queue_tis` calls v5; v1..v4 stay installed.

Revision ID: 0017
Revises: 0016
Create Date: 2026-11-23
"""
from alembic import op

from engine.procedures import install, remove

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v5"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
