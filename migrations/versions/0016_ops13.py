"""Preemption finished (issue 13, gaps; docs/priority.md):

- set_run_state_v2, clear_tis_v2, set_ti_state_v2 (both dialects): operators' cancel / mark /
  kill / clear treat a `preempting` TI as a running one (it ends in the state asked for and
  heartbeat_v3 no longer moves it back to `scheduled`) and delete the pool_reservation rows of
  the TIs they change; same arguments and results as v1 (the v1s stay installed);
- defer_ti_v3 (both dialects): defer_ti_v2 that also takes the Defer of a preempted try (a
  `preempting` TI whose task raised Defer on SIGTERM) outside include_deferred pools: the TI
  becomes `deferred` with its progress kept; same arguments and result as v2;
- preempt_v2: on MySQL/MariaDB preempt_v1 with the victims' row locks taken in id order (the
  order of a worker's heartbeat: no more deadlocks between the two); on PostgreSQL it calls
  preempt_v1 (already in id order); same arguments and result as v1;
- view pending_reasons changed in place (previous text in sql/<dialect>/previous/0016/): a TI
  without a reservation whose pool's free slots are kept by other TIs' reservations says
  'slots reserved for N other TI(s)' instead of 'runnable'.

Revision ID: 0016
Revises: 0015
Create Date: 2026-11-23
"""
from alembic import op

from engine.procedures import install, remove, restore

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

CHANGED = ["pending_reasons"]
NEW = ["set_run_state_v2", "clear_tis_v2", "set_ti_state_v2", "defer_ti_v3", "preempt_v2"]


def upgrade():
    install(op, CHANGED + NEW, revision)


def downgrade():
    remove(op, NEW)
    restore(op, CHANGED, revision, down_revision)
