"""Real `engine scheduler` / `engine worker` processes against one database, kill -9 at will,
and the invariants a crash must never break, checked from what the database recorded.
Used by tests/test_chaos.py (small) and loadtests/chaos.py (as large and long as you like).
"""
from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import sqlalchemy as sa

REPO = Path(__file__).resolve().parents[1]

# Small intervals so crashes are noticed within seconds (production: see docs/operations.md).
FAST = {
    "ENGINE_SCHEDULER_INTERVAL": "0.2",
    "ENGINE_HEARTBEAT_INTERVAL": "0.5",
    "ENGINE_JOB_HEARTBEAT_THRESHOLD": "5",
    "ENGINE_ORPHAN_CHECK_INTERVAL": "1",
    "ENGINE_WORKER_POLL_INTERVAL": "0.1",
    "ENGINE_WORKER_CONCURRENCY": "4",
    "ENGINE_WORKER_SHUTDOWN_TIMEOUT": "5",
    "ENGINE_QUEUED_TIMEOUT": "60",
}

# For tests that kill nothing: a service a loaded machine stalls for a few seconds is never
# declared dead (FAST's 5 s threshold is for the tests that kill -9 and wait for the takeover).
CALM = {"ENGINE_JOB_HEARTBEAT_THRESHOLD": "60"}

CHAOS_POOL, CHAOS_POOL_SLOTS = "chaos", 4


HELD_TASK = "t0"  # chaos_dag_source(hold=...): the task whose first try in the first run is held


def chaos_dag_source(runs: int, tasks: int, out_file: Path, dag_id: str = "chaos", executor: str = "default",
                     hold: Path | None = None) -> str:
    """A yearly DAG with catchup: exactly `runs` runs are due (the last `runs` whole years).
    Tasks: first >> middle ones >> last, sleeping 0.1-0.3 s, each appending "run task try" to
    out_file when it starts. Limits in play: the pool (some tasks take 2 slots),
    max_active_tasks, max_active_runs, max_active_tis_per_dag and _per_dagrun.
    hold: the first try of HELD_TASK in the first run (min(expected_run_ids)) waits until that file
    exists (at most 120 s) before its sleep, so that a kill -9 of its worker surely hits a try that runs."""
    year = datetime.now(timezone.utc).year - runs
    wait = "" if hold is None else (
        f'[ "$ENGINE_RUN_ID $ENGINE_TASK_ID $ENGINE_TRY_NUMBER" != "{min(expected_run_ids(runs))} {HELD_TASK} 1" ] '
        f'|| for i in $(seq 1200); do [ -e {hold} ] && break; sleep 0.1; done; ')
    return textwrap.dedent(f'''
        from engine import DAG, BashTask

        CMD = 'echo "$ENGINE_RUN_ID $ENGINE_TASK_ID $ENGINE_TRY_NUMBER" >> {out_file}; {wait}sleep %s'
        with DAG("{dag_id}", schedule="0 0 1 1 *", start_date="{year}-01-01", catchup=True,
                 max_active_runs=4, max_active_tasks=3):
            ts = [BashTask(f"t{{i}}", bash_command=CMD % (0.1 + 0.1 * (i % 3)), pool="{CHAOS_POOL}",
                           pool_slots=2 if i % 4 == 1 else 1, retries=3, retry_delay=0,
                           max_active_tis_per_dag=2 if i == 2 else None,
                           max_active_tis_per_dagrun=1 if i == 3 else None, executor="{executor}")
                  for i in range({tasks})]
            if len(ts) > 2:
                ts[0] >> ts[1:-1] >> ts[-1]
    ''')


def expected_run_ids(runs: int) -> set[str]:
    year = datetime.now(timezone.utc).year
    return {f"scheduled__{y}-01-01T00:00:00+00:00" for y in range(year - runs, year)}


@dataclass
class Proc:
    name: str
    kind: str
    popen: subprocess.Popen
    log: Path
    extra_env: dict
    killed: bool = False

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Cluster:
    """Engine processes started with `sys.executable -m cli.main -v KIND` and ENGINE_* settings."""
    db_url: str
    workdir: Path
    env: dict = field(default_factory=dict)
    procs: list[Proc] = field(default_factory=list)
    kills: list[str] = field(default_factory=list)

    def start(self, kind: str, extra_env: dict | None = None, args: tuple = (), new_session: bool = False) -> Proc:
        name = f"{kind}{sum(p.kind == kind for p in self.procs) + 1}"
        logs = self.workdir / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, **FAST, "ENGINE_DATABASE_URL": self.db_url,
               "ENGINE_HOME": str(self.workdir / "home"), "PYTHONPATH": str(REPO), **self.env, **(extra_env or {})}
        log = logs / f"{name}.log"
        with open(log, "wb") as out:
            popen = subprocess.Popen([sys.executable, "-m", "cli.main", "-v", kind, *args], cwd=self.workdir,
                                     env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=new_session)
        proc = Proc(name, kind, popen, log, extra_env or {})
        self.procs.append(proc)
        return proc

    def alive(self, kind: str | None = None) -> list[Proc]:
        return [p for p in self.procs if p.popen.poll() is None and (kind is None or p.kind == kind)]

    def kill9(self, proc: Proc) -> None:
        proc.popen.send_signal(signal.SIGKILL)
        proc.popen.wait(timeout=10)
        proc.killed = True
        self.kills.append(proc.name)

    def stop(self, timeout: float = 30) -> dict[str, int]:
        """SIGTERM every live process, wait; SIGKILL what is left. Returns name -> exit code."""
        for p in self.alive():
            p.popen.send_signal(signal.SIGTERM)
        end = time.monotonic() + timeout
        codes = {}
        for p in self.procs:
            if p.killed:
                continue
            try:
                codes[p.name] = p.popen.wait(timeout=max(0.1, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.popen.kill()
                codes[p.name] = p.popen.wait()
        return codes


def job_of(conn, proc: Proc):
    """The job row of a process (by pid; the newest when it registered again)."""
    return conn.execute(sa.text("SELECT id, state FROM job WHERE pid = :pid ORDER BY id DESC LIMIT 1"),
                        {"pid": proc.popen.pid}).first()


def running_tis_of(conn, proc: Proc, held_runs: int | None = None) -> int:
    """How many TIs the process's job runs now; with held_runs, only the held try of
    chaos_dag_source(runs=held_runs, hold=...)."""
    text = ("SELECT count(*) FROM task_instance ti JOIN job j ON j.id = ti.worker_job_id "
            "WHERE j.pid = :pid AND j.state = 'running' AND ti.state = 'running'")
    params = {"pid": proc.popen.pid}
    if held_runs is not None:
        text += " AND ti.run_id = :run AND ti.task_id = :task AND ti.try_number = 1"
        params.update(run=min(expected_run_ids(held_runs)), task=HELD_TASK)
    return conn.execute(sa.text(text), params).scalar()


def run_counts(conn, dag_id: str) -> Counter:
    return Counter(dict(conn.execute(sa.text(
        "SELECT state, count(*) FROM dag_run WHERE dag_id = :d GROUP BY state"), {"d": dag_id}).all()))


# ---- invariants --------------------------------------------------------------------------------

def _sweep(intervals: dict, limits: dict) -> list[str]:
    """intervals: key -> [(start, end, weight)]; limits: key -> max. At no instant may the
    summed weight of the intervals open at that instant exceed the key's limit (an interval
    ending at t and one starting at t do not overlap)."""
    bad = []
    for key, spans in intervals.items():
        limit = limits.get(key)
        if limit is None or limit < 0:
            continue
        events = sorted([(s, 1, w) for s, e, w in spans] + [(e, 0, -w) for s, e, w in spans])
        level = peak = 0
        for t, _, w in events:
            level += w
            if level > peak:
                peak, at = level, t
        if peak > limit:
            bad.append(f"{key}: {peak} > {limit} at {at}")
    return bad


def check_invariants(conn, dag_id: str, expected_runs: set[str] | None = None,
                     executions: Path | None = None) -> dict:
    """Everything a crash must not break, from dag_run, task_instance and task_instance_history.
    Returns {"counts": {...}, "invariants": {name: [violations]}}; all lists empty = all held."""
    q = lambda text, **p: conn.execute(sa.text(text), p).all()
    inv: dict[str, list[str]] = {}

    runs = q("SELECT run_id, state, start_date, end_date FROM dag_run WHERE dag_id = :d", d=dag_id)
    inv["every run succeeded"] = [f"{r.run_id}: {r.state}" for r in runs if r.state != "success"]
    if expected_runs is not None:
        got = {r.run_id for r in runs}
        inv["exactly the expected runs"] = ([f"missing {x}" for x in sorted(expected_runs - got)]
                                           + [f"unexpected {x}" for x in sorted(got - expected_runs)])
    inv["no (dag_id, run_id) twice"] = [f"{r.run_id} x{r.n}" for r in q(
        "SELECT run_id, count(*) AS n FROM dag_run GROUP BY dag_id, run_id HAVING count(*) > 1")]

    tis = q("SELECT id, run_id, task_id, state, try_number FROM task_instance WHERE dag_id = :d", d=dag_id)
    hist = q("SELECT h.ti_id, h.run_id, h.task_id, h.try_number, h.state, h.pool, h.pool_slots, h.start_date, "
             "h.end_date, h.reason FROM task_instance_history h WHERE h.dag_id = :d", d=dag_id)
    inv["no (ti, try_number) recorded twice"] = [f"ti {k[0]} try {k[1]} x{n}" for k, n in Counter(
        (h.ti_id, h.try_number) for h in hist).items() if n > 1]
    by_ti = defaultdict(dict)
    for h in hist:
        by_ti[h.ti_id][h.try_number] = h
    problems = []
    for ti in tis:
        tries = by_ti[ti.id]
        if sorted(tries) != list(range(1, ti.try_number + 1)):
            problems.append(f"ti {ti.id} ({ti.run_id} {ti.task_id}): try {ti.try_number}, history of tries {sorted(tries)}")
        elif any(tries[n].state != "failed" for n in range(1, ti.try_number)):
            problems.append(f"ti {ti.id}: an earlier try is not recorded as failed")
    inv["every try recorded; a TI run again shows its failed try"] = problems

    if executions is not None:
        lines = executions.read_text().split("\n") if executions.exists() else []
        seen = Counter(line for line in lines if line.strip())
        inv["no try executed twice"] = [f"{k} x{n}" for k, n in seen.items() if n > 1]
        ok_tries = {f"{h.run_id} {h.task_id} {h.try_number}" for h in hist if h.state == "success"}
        inv["every successful try was executed"] = sorted(ok_tries - set(seen))[:10]

    # Limits, swept over the recorded start/end of every try that started.
    pools = dict(q("SELECT name, slots FROM pool"))
    tasks = {r.task_id: r for r in q("SELECT task_id, max_active_tis_per_dag, max_active_tis_per_dagrun "
                                       "FROM task WHERE dag_id = :d", d=dag_id)}
    dag = q("SELECT max_active_tasks, max_active_runs FROM dag WHERE dag_id = :d", d=dag_id)[0]
    par = dict(q("SELECT name, parallelism FROM executor"))
    spans = defaultdict(list)
    limits = {}
    for h in hist:
        if h.start_date is None:
            continue  # a try that never started (requeue bound reached)
        span = (h.start_date, h.end_date)
        spans[("pool", h.pool)].append((*span, h.pool_slots))
        limits[("pool", h.pool)] = pools.get(h.pool)
        spans[("max_active_tasks", h.run_id)].append((*span, 1))
        limits[("max_active_tasks", h.run_id)] = dag.max_active_tasks
        t = tasks[h.task_id]
        spans[("max_active_tis_per_dag", h.task_id)].append((*span, 1))
        limits[("max_active_tis_per_dag", h.task_id)] = t.max_active_tis_per_dag
        spans[("max_active_tis_per_dagrun", h.run_id, h.task_id)].append((*span, 1))
        limits[("max_active_tis_per_dagrun", h.run_id, h.task_id)] = t.max_active_tis_per_dagrun
        spans[("parallelism", "default")].append((*span, 1))
        limits[("parallelism", "default")] = par.get("default")
    for r in runs:
        if r.start_date is not None and r.end_date is not None:
            spans[("max_active_runs", dag_id)].append((r.start_date, r.end_date, 1))
    limits[("max_active_runs", dag_id)] = dag.max_active_runs
    inv["no limit exceeded at any instant"] = _sweep(spans, limits)
    # The usage counters (kept by triggers, folded by queue_tis) equal a recount, kill -9 or not.
    inv["usage counters equal the recount"] = [tuple(r) for r in q("SELECT * FROM usage_drift")]

    reasons = Counter(re.sub(r"\d+", "N", h.reason or "-") for h in hist if h.state == "failed")
    counts = {
        "runs": len(runs), "runs_success": sum(r.state == "success" for r in runs),
        "tis": len(tis), "tries": len(hist), "tis_run_again": sum(ti.try_number > 1 for ti in tis),
        "failed_tries": sum(h.state == "failed" for h in hist), "failed_try_reasons": dict(reasons),
        "jobs_declared_dead": conn.execute(sa.text("SELECT count(*) FROM job WHERE state = 'failed'")).scalar(),
    }
    return {"counts": counts, "invariants": inv}


def violations(report: dict) -> dict:
    return {k: v for k, v in report["invariants"].items() if v}


# One scheduler runs in another time zone (Python and the PostgreSQL session): nothing may change.
OTHER_TZ = {"TZ": "Asia/Kolkata", "PGTZ": "Asia/Kolkata"}


def run_chaos(eng, db_url: str, workdir: Path, runs: int, tasks: int, schedulers: int = 3, workers: int = 2,
              kills: int = 2, seconds: float = 120, kill_window: tuple = (1.5, 6.0), seed: int | None = None,
              say=lambda msg: None) -> dict:
    """Run `runs` x `tasks` on real processes while kill -9 hits schedulers and workers (alternately,
    at random moments within kill_window seconds; a worker only while it runs something: the first
    worker killed is the one that runs the held try of chaos_dag_source, held until then), each
    replaced at once. Ends when every run is done or after `seconds`; then waits for the killed
    jobs to be declared dead, stops the rest with SIGTERM and checks the invariants."""
    from engine.dagsync import sync

    seed = random.randrange(1 << 30) if seed is None else seed
    rng = random.Random(seed)
    first = rng.choice(["scheduler", "worker"])
    plan = [(t, first if n % 2 == 0 else ({"scheduler", "worker"} - {first}).pop())
            for n, t in enumerate(sorted(rng.uniform(*kill_window) for _ in range(kills)))]
    executions = workdir / "executions.txt"
    dags = workdir / "dags"
    dags.mkdir(parents=True, exist_ok=True)
    # With a worker kill planned, the first run's first try of HELD_TASK runs until the first worker
    # kill hits it (or this ends): that kill surely meets a running try, however fast the machine
    # runs the others.
    release = workdir / "release-held-try"
    held = any(kind == "worker" for _, kind in plan)
    (dags / "chaos.py").write_text(chaos_dag_source(runs, tasks, executions, hold=release if held else None))
    with eng.begin() as conn:
        conn.execute(sa.text("INSERT INTO pool (name, slots) VALUES (:n, :s)"), {"n": CHAOS_POOL, "s": CHAOS_POOL_SLOTS})
    sync(eng, dags)

    cluster = Cluster(db_url, workdir)
    for i in range(schedulers):
        cluster.start("scheduler", OTHER_TZ if i == 0 else None)
    for _ in range(workers):
        cluster.start("worker")
    started = time.monotonic()
    finished = False
    codes: dict = {}
    try:
        while time.monotonic() - started < seconds:
            with eng.connect() as conn:
                counts = run_counts(conn, "chaos")
                if sum(counts.values()) >= runs and counts["success"] + counts["failed"] == sum(counts.values()):
                    finished = True
                    break
                if plan and time.monotonic() - started >= plan[0][0]:
                    kind = plan[0][1]
                    victims = cluster.alive(kind)
                    if kind == "worker" and held:   # the worker that runs the held try, once it does
                        busy = [p for p in victims if running_tis_of(conn, p, held_runs=runs) > 0]
                        late = False
                    else:
                        busy = [p for p in victims if kind != "worker" or running_tis_of(conn, p) > 0]
                        # a worker is given longer to be caught running something: its tries are short
                        # (forked from its zygote) and, on a loaded machine, the processes start slowly
                        late = time.monotonic() - started > plan[0][0] + (20 if kind == "worker" else 5)
                    if busy or (late and victims):
                        held = held and kind != "worker"
                        victim = rng.choice(busy or victims)
                        cluster.kill9(victim)
                        cluster.start(kind, victim.extra_env)
                        say(f"{time.monotonic() - started:6.1f}s kill -9 {victim.name} (pid {victim.popen.pid}); "
                            f"runs {dict(counts)}")
                        plan.pop(0)
            time.sleep(0.2)
        elapsed = time.monotonic() - started
        # The killed processes must be declared dead by the survivors (job_heartbeat_threshold).
        killed = [p for p in cluster.procs if p.killed]
        deadline = time.monotonic() + float(FAST["ENGINE_JOB_HEARTBEAT_THRESHOLD"]) + 10
        while time.monotonic() < deadline:
            with eng.connect() as conn:
                states = [job_of(conn, p) for p in killed]
            if all(j is None or j.state == "failed" for j in states):
                break
            time.sleep(0.3)
    finally:
        release.touch()  # (a run with no worker kill, or one that failed before it: nothing stays held)
        codes = cluster.stop()
    with eng.connect() as conn:
        report = check_invariants(conn, "chaos", expected_run_ids(runs), executions)
        killed_jobs = [job_of(conn, p) for p in cluster.procs if p.killed]
        stopped_jobs = [job_of(conn, p) for p in cluster.procs if not p.killed]
    invariants = report["invariants"]
    invariants["killed processes declared dead"] = [f"job {j.id}: {j.state}" for j in killed_jobs
                                                     if j is not None and j.state != "failed"]
    invariants["stopped processes exit 0, job finished"] = (
        [f"{name}: exit {code}" for name, code in codes.items() if code != 0]
        + [f"job {j.id}: {j.state}" for j in stopped_jobs if j is None or j.state != "success"])
    invariants["all runs done in time"] = [] if finished else [f"not done after {seconds} s"]
    report["counts"].update(seed=seed, seconds=round(elapsed, 1), kills=len(cluster.kills),
                            killed=cluster.kills, processes=len(cluster.procs))
    report["logs"] = {p.name: str(p.log) for p in cluster.procs}
    return report
