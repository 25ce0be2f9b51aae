"""Real processes racing on defer / resume cycles (used by tests/test_deferral_invariant.py).

Schedulers call queue_tis_v1; workers claim (claim_tis_v1) and either defer (defer_ti_v1) or
finish (finish_ti_v1) what they claimed; a firer fires random deferred triggers
(fire_trigger_v1: with an event, or with an error now and then). Every process checks after
every step, in one SQL statement, that no row of limit_usage has used > cap.
"""
from __future__ import annotations

import json
import random
import time

import sqlalchemy as sa

from engine import db
from engine.scheduler import queue_knobs
from tests.race import VIOLATIONS, Window

FAR = json.dumps({"moment": "2999-01-01T00:00:00+00:00"})


def _violations(eng) -> list:
    with eng.connect() as c:
        return [tuple(r) for r in c.execute(VIOLATIONS)]


def scheduler_loop(url: str, window: Window, seed: int, out) -> None:
    eng = db.make_engine(url)
    rng = random.Random(seed)
    queued, busy, violations = 0, 0, []
    while window.racing():
        try:
            with eng.begin() as c:
                queued += len(db.run(c, "queue_tis", max_tis=rng.randint(1, 10), job_id=seed, now=None,
                                       **queue_knobs()).all())
        except sa.exc.DBAPIError as exc:
            if not db.is_lock_busy(exc):
                raise
            busy += 1
        violations += _violations(eng)
    eng.dispose()
    out.put({"queued": queued, "busy": busy, "violations": violations})


def worker_loop(url: str, window: Window, seed: int, out) -> None:
    eng = db.make_engine(url)
    rng = random.Random(seed)
    running, counts, violations = [], {"deferred": 0, "finished": 0, "resumes_claimed": 0}, []
    while window.racing():
        with db.connect(eng) as c:
            new = db.run(c, "claim_tis", job_id=None, hostname=f"w{seed}", queues=["default"],
                         limit=rng.randint(1, 4), log_dir="/tmp", now=None).all()
        counts["resumes_claimed"] += sum(t.next_method is not None for t in new)
        running += new
        violations += _violations(eng)
        rng.shuffle(running)
        for ti in running[: rng.randint(0, len(running))]:
            with db.connect(eng) as c:
                if rng.random() < 0.6:
                    db.run(c, "defer_ti", ti_id=ti.ti_id, try_number=ti.try_number,
                           classpath="engine.triggers:DateTimeTrigger", trigger_kwargs=FAR, method="resume",
                           next_kwargs="{}", timeout=None, now=None)
                    counts["deferred"] += 1
                else:
                    db.run(c, "finish_ti", ti_id=ti.ti_id, try_number=ti.try_number, exit_code=0, timed_out=False,
                           reason=None, now=None)
                    counts["finished"] += 1
            running.remove(ti)
            violations += _violations(eng)
        time.sleep(rng.random() * 0.01)
    eng.dispose()
    out.put({**counts, "violations": violations})


def firer_loop(url: str, window: Window, seed: int, out) -> None:
    eng = db.make_engine(url)
    rng = random.Random(seed)
    fired: dict[str, int] = {}
    violations = []
    while window.racing():
        with eng.connect() as c:
            waiting = c.execute(sa.text("SELECT trigger_id FROM task_instance WHERE state = 'deferred'")).scalars().all()
        for tid in rng.sample(waiting, min(len(waiting), rng.randint(1, 6))):
            error = "trigger failed: boom" if rng.random() < 0.1 else None
            with db.connect(eng) as c:
                state = db.run(c, "fire_trigger", trigger_id=tid, event=None if error else '{"n": 1}', error=error,
                               now=None, boost=rng.choice([0, 3, 1000])).scalar()
            fired[str(state)] = fired.get(str(state), 0) + 1
            violations += _violations(eng)
        time.sleep(rng.random() * 0.01)
    eng.dispose()
    out.put({"fired": fired, "violations": violations})


def race(url: str, seconds: float, schedulers: int = 2, workers: int = 2, firers: int = 1,
         enough: str | None = None) -> dict:
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    out, window = ctx.Queue(), Window(ctx)
    procs = [ctx.Process(target=scheduler_loop, args=(url, window, i + 1, out)) for i in range(schedulers)]
    procs += [ctx.Process(target=worker_loop, args=(url, window, 100 + i, out)) for i in range(workers)]
    procs += [ctx.Process(target=firer_loop, args=(url, window, 200 + i, out)) for i in range(firers)]
    results = window.run(url, procs, out, seconds, enough)
    total = lambda key: sum(r.get(key, 0) for r in results)
    fired: dict[str, int] = {}
    for r in results:
        for k, v in r.get("fired", {}).items():
            fired[k] = fired.get(k, 0) + v
    return {"queued": total("queued"), "busy": total("busy"), "deferred": total("deferred"),
            "finished": total("finished"), "resumes_claimed": total("resumes_claimed"), "fired": fired,
            "violations": [v for r in results for v in r["violations"]], "exit_codes": [p.exitcode for p in procs]}
