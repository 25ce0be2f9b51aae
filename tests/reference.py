"""The selection rule of DESIGN section 5 in plain Python: the oracle queue_tis must match.

Walk the candidates (scheduled TIs of running runs of unpaused DAGs) in the order
priority_weight DESC, run_after, map_index, id; take one iff every limit still holds with it;
stop after max_tis.
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


@dataclass
class World:
    pools: dict        # name -> (slots, include_deferred); slots -1 = unlimited
    parallelism: dict  # executor -> limit or None
    dags: dict         # dag_id -> (max_active_tasks or None, is_paused)
    tasks: dict        # (dag_id, task_id) -> (max_active_tis_per_dag, max_active_tis_per_dagrun)
    runs: dict         # run id -> (dag_id, state, run_after)
    tis: list          # [TI]


def greedy(w: World, max_tis: int) -> list[int]:
    active = ("queued", "running")
    pool_used = Counter()
    for t in w.tis:
        slots, include_deferred = w.pools[t.pool]
        if t.state in active or (t.state == "deferred" and include_deferred):
            pool_used[t.pool] += t.pool_slots
    run_used = Counter(t.run for t in w.tis if t.state in active)
    task_used = Counter((t.dag_id, t.task_id) for t in w.tis if t.state in active)
    taskrun_used = Counter((t.run, t.task_id) for t in w.tis if t.state in active)
    exec_used = Counter(t.executor for t in w.tis if t.state in active)

    candidates = [t for t in w.tis if t.state == "scheduled" and w.runs[t.run][1] == "running"
                  and not w.dags[t.dag_id][1]]
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
