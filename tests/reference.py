"""The selection rule of queue_tis in plain Python: the oracle queue_tis must match.

Walk the candidates (scheduled TIs of running runs of DAGs neither paused nor draining, plus
resumes of any DAG; in both cases the DAG and the task active, the pool and the executor known)
in the order priority_weight DESC, run_after, map_index, id; take one iff every limit still
holds with it; stop after max_tis. A deferred TI in a pool with include_deferred counts against
every limit (it keeps its place); elsewhere against none. Partitions are tuples of ids, never
joined strings: ids may contain dots.

queue_tis_v1 follows the same rule for worlds whose DAGs and tasks are all active and whose
TIs' pools and executors all exist (it predates those checks).
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass


@dataclass
class TI:
    id: int
    dag_id: str
    run: int          # dag_run id
    task_id: str
    map_index: int
    state: str
    priority_weight: int
    pool: str
    pool_slots: int
    executor: str = "default"
    resuming: bool = False  # next_method set: its trigger fired (only meaningful when scheduled)


@dataclass
class World:
    pools: dict        # name -> (slots, include_deferred); slots -1 = unlimited
    parallelism: dict  # executor -> limit or None
    dags: dict         # dag_id -> (max_active_tasks or None, is_paused)
    tasks: dict        # (dag_id, task_id) -> (max_active_tis_per_dag, max_active_tis_per_dagrun)
    runs: dict         # run id -> (dag_id, state, run_after)
    tis: list          # [TI]
    draining: frozenset = frozenset()  # dag_ids with is_draining
    drain_all: bool = False            # the deployment drains
    removed_dags: frozenset = frozenset()   # dag_ids with is_active false (a sync removed them)
    removed_tasks: frozenset = frozenset()  # (dag_id, task_id) with is_active false
    # A TI's pool may be missing from `pools` and its executor from `parallelism`: no row.


def greedy(w: World, max_tis: int) -> list[int]:
    holding = [t for t in w.tis if t.state in ("queued", "running")
               or (t.state == "deferred" and w.pools.get(t.pool, (0, False))[1])]
    pool_used = Counter()
    for t in holding:
        pool_used[t.pool] += t.pool_slots
    run_used = Counter(t.run for t in holding)
    task_used = Counter((t.dag_id, t.task_id) for t in holding)
    taskrun_used = Counter((t.run, t.task_id) for t in holding)
    exec_used = Counter(t.executor for t in holding)

    def admitted(t) -> bool:
        if t.dag_id in w.removed_dags or (t.dag_id, t.task_id) in w.removed_tasks:
            return False
        if t.pool not in w.pools or t.executor not in w.parallelism:
            return False
        return t.resuming or not (w.dags[t.dag_id][1] or t.dag_id in w.draining or w.drain_all)

    candidates = [t for t in w.tis if t.state == "scheduled" and w.runs[t.run][1] == "running" and admitted(t)]
    candidates.sort(key=lambda t: (-t.priority_weight, w.runs[t.run][2], t.map_index, t.id))
    taken: list[int] = []
    for t in candidates:
        if len(taken) == max_tis:
            break
        slots = w.pools[t.pool][0]
        max_tasks = w.dags[t.dag_id][0]
        per_dag, per_run = w.tasks[(t.dag_id, t.task_id)]
        parallelism = w.parallelism[t.executor]
        fits = ((slots < 0 or pool_used[t.pool] + t.pool_slots <= slots)
                and (max_tasks is None or run_used[t.run] + 1 <= max_tasks)
                and (per_dag is None or task_used[(t.dag_id, t.task_id)] + 1 <= per_dag)
                and (per_run is None or taskrun_used[(t.run, t.task_id)] + 1 <= per_run)
                and (parallelism is None or exec_used[t.executor] + 1 <= parallelism))
        if fits:
            taken.append(t.id)
            pool_used[t.pool] += t.pool_slots
            run_used[t.run] += 1
            task_used[(t.dag_id, t.task_id)] += 1
            taskrun_used[(t.run, t.task_id)] += 1
            exec_used[t.executor] += 1
    return taken
