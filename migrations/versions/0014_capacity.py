"""The critical section's fixed cost (issue 11 targets 1-4): queue_tis_v5 (both dialects).

- queue_tis_v5: queue_tis_v4 (same arguments, result, lock, knobs and greedy walk) with a
  cheaper fixed part per call (docs/critical-section.md, "v5"); queue_tis_v1..v4 stay
  installed, so schedulers pinned to them (procedure_versions = "queue_tis=4") keep working
  during a rolling upgrade (all take the row scheduler_lock('queue_tis')).

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-23
"""
from alembic import op

from engine.procedures import install, remove

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

NEW = ["queue_tis_v5"]

# PostgreSQL: queue_tis_v5's scratch tables. v4's were session-local temporary tables ON COMMIT
# DELETE ROWS, and PostgreSQL truncates every such table (with its index and TOAST table) at the
# commit of any transaction that touched one: ~20 file truncations per call, 10-40 ms on this
# machine, more than the rest of a small call. These are ordinary UNLOGGED tables (no WAL, no
# truncation at commit; autovacuum reclaims their rows), shared by every session: only the
# holder of scheduler_lock('queue_tis') reads or writes them, and it empties them first.
SCRATCH = {
    "queue_tis_v5_used_pool": "pool text PRIMARY KEY, n int",
    "queue_tis_v5_used_run": "dag_run_id bigint PRIMARY KEY, n int, cap int",
    "queue_tis_v5_used_task": "dag_id text, task_id text, n int, cap int, PRIMARY KEY (dag_id, task_id)",
    "queue_tis_v5_used_task_run": "dag_run_id bigint, task_id text, n int, cap int, PRIMARY KEY (dag_run_id, task_id)",
    "queue_tis_v5_used_executor": "executor text PRIMARY KEY, n int, cap int",
    "queue_tis_v5_page": "id bigint, pool text, priority_weight int, run_after timestamptz, map_index int, "
                         "pool_slots int, dag_run_id bigint, dag_id text, task_id text, executor text, page int, "
                         "n int, rn int",
    "queue_tis_v5_cand": "rank int, id bigint, pool text, pool_slots int, dag_run_id bigint, dag_id text, "
                         "task_id text, executor text, pk int, rk int, tk int, mk int, ek int, free_p int, "
                         "free_r int, free_t int, free_m int, free_e int",
}


def upgrade():
    if op.get_context().dialect.name == "postgresql":
        for name, columns in SCRATCH.items():
            op.execute(f"CREATE UNLOGGED TABLE {name} ({columns})")
    install(op, NEW, revision)


def downgrade():
    remove(op, NEW)
    if op.get_context().dialect.name == "postgresql":
        for name in SCRATCH:
            op.execute(f"DROP TABLE {name}")
