"""Executors: hand-over of queued TIs to executors other than the database queue.

- table ti_dispatch: the message in flight of a queued TI of a dispatching executor (one row
  per TI at most: its queued period (queued_at), dispatch token, attempt, when it was sent);
- dispatch_tis_v1 (both dialects): the dispatcher's side: queued TIs of an executor without a
  message in flight get a new token; a message not started within the resend timeout is re-sent
  with a new token (the old one can no longer start anything);
- start_ti_v1 (both dialects): the executor worker's side: queued -> running only for the
  current token (a late, duplicate or redelivered message starts nothing);
- the executor row 'celery' (parallelism 32), for `engine dispatcher` and `engine celery-worker`
  (docs/executors.md).

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from engine.procedures import install, remove

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
ID = sa.String(250).with_variant(sa.Text(), "postgresql")
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}
NEW = ["dispatch_tis_v1", "start_ti_v1"]


def upgrade():
    op.create_table(
        "ti_dispatch",
        sa.Column("ti_id", sa.BigInteger, sa.ForeignKey("task_instance.id", ondelete="CASCADE"), nullable=False),
        sa.Column("executor", ID, nullable=False),
        sa.Column("queued_at", TS, nullable=True),     # the TI's queued_at when sent: its queued period
        sa.Column("token", sa.String(64), nullable=False),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("sent_at", TS, nullable=False),
        sa.PrimaryKeyConstraint("ti_id", name="ti_dispatch_pkey"),
        **MYSQL_TABLE,
    )
    op.bulk_insert(sa.table("executor", sa.column("name"), sa.column("parallelism")),
                   [{"name": "celery", "parallelism": 32}])
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    op.drop_table("ti_dispatch")
    # TIs of the executor go back to the database queue: the executor row has a foreign key.
    op.execute("UPDATE task SET executor = 'default' WHERE executor = 'celery'")
    op.execute("UPDATE task_instance SET executor = 'default' WHERE executor = 'celery'")
    op.execute("DELETE FROM executor WHERE name = 'celery'")
