"""A resume reads its pool's include_deferred after a change of that flag in flight committed
(fire_trigger_v3, send_event_v2). fire_trigger_v2 and v1 (which send_event_v1 calls) read the flag
before the wait for the change's lock (PostgreSQL: by a statement before the UPDATE that waits;
MySQL/MariaDB: from a FUNCTION's read view made earlier in the call): with include_deferred turned
off and the freed slot given to another TI, the resumed TI was queued "keeping its slot", past the
pool's limit (docs/procedures.md, fire_trigger_v3). The named queries fire_trigger and send_event
call the new versions; the triggerer's fire_triggers_v2 decides inside its locking statements
already.

Downgrade: fire_trigger_v3 and send_event_v2 go.

Revision ID: 0048
Revises: 0047
Create Date: 2026-11-25
"""
from alembic import op

from engine.procedures import install, remove

revision = "0048"
down_revision = "0047"
branch_labels = None
depends_on = None

NEW = ["fire_trigger_v3", "send_event_v2"]


def upgrade():
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
