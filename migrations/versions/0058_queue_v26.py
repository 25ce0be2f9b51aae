"""queue_tis_v26 (both dialects) and fold_usage_v2 (MySQL/MariaDB). MySQL/MariaDB: v24's text
folding the usage counters with fold_usage_v2, whose delete of the folded rows is driven from its
copy of them: v1's could be planned as a scan of usage_delta with locking reads, which waited,
under the scheduler's lock, for every delta row of a transaction still open (error 1205 at
innodb_lock_wait_timeout); its scratch table is in Aria on MariaDB (docs/critical-section.md,
"queue_tis_v26"). The named query `fold_usage` calls v2 there. PostgreSQL: queue_tis_v26 calls
queue_tis_v25. The same arguments, knobs, result, lock and rule. The named query `queue_tis` calls
v26; v1..v25 and fold_usage_v1 stay installed.

Revision ID: 0058
Revises: 0057
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, remove

revision = "0058"
down_revision = "0057"
branch_labels = None
depends_on = None

MYSQL_ONLY = ["fold_usage_v2"]
NEW = ["queue_tis_v26"]


def _names() -> list[str]:
    return NEW if op.get_bind().dialect.name == "postgresql" else MYSQL_ONLY + NEW


def upgrade():
    install(op, _names(), revision)


def downgrade():
    remove(op, _names())
