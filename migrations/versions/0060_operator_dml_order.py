"""MySQL/MariaDB: the operator's commands wait for no writer of rows outside what they change
(clear_tis_v4, set_ti_state_v3, set_run_state_v3). Their v2 left the join order of their
multi-table UPDATEs and DELETEs to the optimizer, and InnoDB locks the rows such a statement reads
(shared) as well as those it changes: clear_tis_v2 and set_run_state_v2 could scan
pool_reservation and wait for a reservation that a scheduler had inserted and not committed, and
set_run_state_v2 for another DAG's TI that a worker was finishing (error 1205 at
innodb_lock_wait_timeout, or a deadlock with the scheduler). Each such statement is now led by the
call's selection (STRAIGHT_JOIN). The named queries clear_tis, set_ti_state and set_run_state call
them there (docs/procedures.md, "clear_tis_v4, set_ti_state_v3, set_run_state_v3").

PostgreSQL: nothing (it locks only the rows a statement changes, and its clear_tis_v3 stays).
Downgrade: the three go.

Revision ID: 0060
Revises: 0059
Create Date: 2026-12-07
"""
from alembic import op

from engine.procedures import install, remove

revision = "0060"
down_revision = "0059"
branch_labels = None
depends_on = None

NEW = ["clear_tis_v4", "set_ti_state_v3", "set_run_state_v3"]


def upgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    install(op, NEW, revision)


def downgrade():
    if op.get_bind().dialect.name == "postgresql":
        return
    remove(op, NEW)
