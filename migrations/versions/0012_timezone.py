"""Time zones for cron schedules: `DAG(timezone="Europe/Berlin")` (issue 10, section 4).

- dag.timezone: the IANA zone the DAG's cron is read in ('UTC' by default and for every DAG
  synced before this revision);
- tz_offset: the UTC offsets of each zone a DAG uses, one row per period (zone, utc_from,
  utc_offset seconds east of UTC), written by `engine dags sync` from Python's zoneinfo, so
  both dialects read the same transitions and MariaDB needs no time zone tables;
- cron_next_v3 / cron_prev_v3 (cron in a zone, DST as croniter), create_dag_runs_v3 and
  backfill_v2 (they call them with the DAG's zone).

The released versions stay installed (rolling upgrade: an older scheduler keeps calling
create_dag_runs_v2 and reads every schedule in UTC, as before).

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import mysql

from engine.procedures import install, remove

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

TS = sa.DateTime(timezone=True).with_variant(mysql.DATETIME(fsp=6), "mysql", "mariadb")
ZONE = sa.String(64).with_variant(sa.Text(), "postgresql")
MYSQL_TABLE = {"mysql_engine": "InnoDB", "mysql_charset": "utf8mb4", "mysql_collate": "utf8mb4_bin"}

NEW = ["cron_next_v3", "cron_prev_v3", "create_dag_runs_v3", "backfill_v2"]


def upgrade():
    op.add_column("dag", sa.Column("timezone", ZONE, nullable=False, server_default="UTC"))
    op.create_table(
        "tz_offset",  # one row per period of a zone: its offset from utc_from until the next row's
        sa.Column("zone", sa.String(64), primary_key=True),
        sa.Column("utc_from", TS, primary_key=True),
        sa.Column("utc_offset", sa.Integer, nullable=False),  # seconds east of UTC
        **MYSQL_TABLE,
    )
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    op.drop_table("tz_offset")
    op.drop_column("dag", "timezone")
