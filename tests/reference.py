"""The selection rule of queue_tis in plain Python: the oracle queue_tis must match.

Walk the candidates (scheduled TIs of running runs of DAGs neither paused nor draining, plus
resumes of any DAG; in both cases the DAG and the task active, the pool and the executor known)
in the order priority_weight DESC, run_after, map_index, id; take one iff every limit still
holds with it; stop after max_tis. A deferred TI in a pool with include_deferred counts against
every limit (it keeps its place); elsewhere against none. Partitions are tuples of ids, never
joined strings: ids may contain dots.

queue_tis_v1 follows the same rule for worlds whose DAGs and tasks are all active and whose
TIs' pools and executors all exist (it predates those checks).

queue_tis_v4 (greedy_v4) adds reservations, wide-TI reservations and aging (docs/priority.md):
first drop the reservations whose TI stopped waiting; with reserve_after, give each limited pool
without a 'wide' reservation one for its first wide candidate that waited long enough; serve the
reserving TIs first in (since, ti_id) order, each queued iff it fits, else holding what its pool
has free up to its slots; then the greedy walk above over the other candidates, in the order of
the effective priority, with the held slots counted as used.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field


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
    since: int | None = None  # minutes after T0 it became scheduled (updated_at; None: its run's run_after)


@dataclass
class Reservation:
    ti_id: int
    pool: str
    slots: int
    reason: str   # 'wide' or 'preemption'
    since: float  # minutes after T0


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
    reservations: list = field(default_factory=list)  # [Reservation] (pool_reservation)
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


INT32_MAX = 2**31 - 1


def effective_priority(w: World, t: TI, now: float, aging_rate: float, aging_cap: int) -> int:
    """priority_weight + least(cap, floor(rate * seconds scheduled / 60)) (now and since in minutes)."""
    if not (aging_rate > 0 and aging_cap > 0):
        return t.priority_weight
    since = t.since if t.since is not None else w.runs[t.run][2]
    boost = min(aging_cap, math.floor(aging_rate * max(0.0, (now - since) * 60) / 60))
    return min(INT32_MAX, t.priority_weight + boost)


def greedy_v4(w: World, max_tis: int, now: float = 0, aging_rate: float = 0, aging_cap: int = 0,
              reserve_after: float = 0) -> list[int]:
    """queue_tis_v4's rule; updates w.reservations as the procedure updates pool_reservation."""
    holding = [t for t in w.tis if t.state in ("queued", "running", "preempting")
               or (t.state == "deferred" and w.pools.get(t.pool, (0, False))[1])]
    used = {"pool": Counter(), "run": Counter(), "task": Counter(), "taskrun": Counter(), "exec": Counter()}
    for t in holding:
        used["pool"][t.pool] += t.pool_slots
    for t in holding:
        used["run"][t.run] += 1
        used["task"][(t.dag_id, t.task_id)] += 1
        used["taskrun"][(t.run, t.task_id)] += 1
        used["exec"][t.executor] += 1

    def admitted(t) -> bool:
        if t.dag_id in w.removed_dags or (t.dag_id, t.task_id) in w.removed_tasks:
            return False
        if t.pool not in w.pools or t.executor not in w.parallelism:
            return False
        return t.resuming or not (w.dags[t.dag_id][1] or t.dag_id in w.draining or w.drain_all)

    def candidate(t) -> bool:
        return t.state == "scheduled" and w.runs[t.run][1] == "running" and admitted(t)

    def fits(t) -> bool:
        slots = w.pools[t.pool][0]
        max_tasks = w.dags[t.dag_id][0]
        per_dag, per_run = w.tasks[(t.dag_id, t.task_id)]
        parallelism = w.parallelism[t.executor]
        return ((slots < 0 or used["pool"][t.pool] + t.pool_slots <= slots)
                and (max_tasks is None or used["run"][t.run] + 1 <= max_tasks)
                and (per_dag is None or used["task"][(t.dag_id, t.task_id)] + 1 <= per_dag)
                and (per_run is None or used["taskrun"][(t.run, t.task_id)] + 1 <= per_run)
                and (parallelism is None or used["exec"][t.executor] + 1 <= parallelism))

    def take(t) -> None:
        taken.append(t.id)
        used["pool"][t.pool] += t.pool_slots
        used["run"][t.run] += 1
        used["task"][(t.dag_id, t.task_id)] += 1
        used["taskrun"][(t.run, t.task_id)] += 1
        used["exec"][t.executor] += 1

    by_id = {t.id: t for t in w.tis}
    key = {t.id: (-effective_priority(w, t, now, aging_rate, aging_cap), w.runs[t.run][2], t.map_index, t.id)
           for t in w.tis}
    # R1: drop what stopped waiting (or can never fit its pool).
    w.reservations = [r for r in w.reservations
                      if r.ti_id in by_id and candidate(by_id[r.ti_id]) and by_id[r.ti_id].pool == r.pool
                      and w.pools[r.pool][0] >= by_id[r.ti_id].pool_slots]
    # R2: wide reservations.
    if reserve_after > 0:
        for pool, (slots, _) in sorted(w.pools.items()):
            if slots < 0 or any(r.pool == pool and r.reason == "wide" for r in w.reservations):
                continue
            reserving = {r.ti_id for r in w.reservations}
            wide = [t for t in w.tis if candidate(t) and t.pool == pool and 1 < t.pool_slots <= slots
                    and t.id not in reserving
                    and ((t.since if t.since is not None else w.runs[t.run][2]) * 60 <= now * 60 - reserve_after)]
            if wide:
                t = min(wide, key=lambda t: key[t.id])
                w.reservations.append(Reservation(t.id, pool, t.pool_slots, "wide", now))
    # R3: reserving TIs first.
    taken: list[int] = []
    for r in sorted(w.reservations, key=lambda r: (r.since, r.ti_id)):
        if len(taken) == max_tis:
            break
        t = by_id[r.ti_id]
        if fits(t):
            take(t)
        else:
            free = w.pools[r.pool][0] - used["pool"][r.pool]
            if free > 0:
                used["pool"][r.pool] += min(r.slots, free)
    reserving = {r.ti_id for r in w.reservations}
    candidates = [t for t in w.tis if candidate(t) and t.id not in reserving]
    candidates.sort(key=lambda t: key[t.id])
    for t in candidates:
        if len(taken) == max_tis:
            break
        if fits(t):
            take(t)
    w.reservations = [r for r in w.reservations if r.ti_id not in taken]  # R4: served
    return taken
