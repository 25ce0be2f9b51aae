"""queue_tis_v1 queues exactly the greedy set of the reference model, call after call."""
from __future__ import annotations

import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reference import TI, World, greedy
from tests.world import load_world, queue


@st.composite
def worlds(draw):
    pools = {f"p{i}": (draw(st.sampled_from([-1, 0, 1, 2, 3, 4, 6])), draw(st.booleans()))
             for i in range(draw(st.integers(1, 3)))}
    pools["default_pool"] = (128, False)
    parallelism = {"default": draw(st.sampled_from([None, None, 2, 5, 12])),
                   "other": draw(st.sampled_from([None, 1, 3]))}
    dags = {f"d{i}": (draw(st.sampled_from([None, 1, 2, 4])), draw(st.booleans()) and draw(st.booleans()))
            for i in range(draw(st.integers(1, 3)))}
    tasks = {}
    for dag_id in dags:
        for j in range(draw(st.integers(1, 3))):
            tasks[(dag_id, f"t{j}")] = (draw(st.sampled_from([None, None, 1, 2, 3])),
                                        draw(st.sampled_from([None, None, 1, 2])))
    runs = {}
    for i in range(1, draw(st.integers(1, 5)) + 1):
        runs[i] = (draw(st.sampled_from(sorted(dags))), draw(st.sampled_from(["running"] * 4 + ["queued"])),
                   draw(st.integers(0, 3)))  # run_after minutes: ties on purpose
    tis = []
    used = set()
    for _ in range(draw(st.integers(0, 40))):
        run = draw(st.sampled_from(sorted(runs)))
        dag_id = runs[run][0]
        task_id = draw(st.sampled_from(sorted(t for d, t in tasks if d == dag_id)))
        map_index = draw(st.integers(-1, 3))
        if (run, task_id, map_index) in used:
            continue
        used.add((run, task_id, map_index))
        tis.append(TI(id=len(tis) + 1, dag_id=dag_id, run=run, task_id=task_id, map_index=map_index,
                      state=draw(st.sampled_from(["scheduled"] * 4 + ["queued", "running", "deferred", "deferred", "success"])),
                      priority_weight=draw(st.integers(1, 3)),
                      pool=draw(st.sampled_from(sorted(pools))), pool_slots=draw(st.integers(1, 4)),
                      executor=draw(st.sampled_from(["default", "default", "other"])),
                      resuming=draw(st.booleans()) and draw(st.booleans())))
    # Drain (a DAG's, or the deployment's): like pause, except for resumes.
    draining = frozenset(d for d in sorted(dags) if draw(st.booleans()) and draw(st.booleans()))
    drain_all = draw(st.booleans()) and draw(st.booleans()) and draw(st.booleans())
    return World(pools, parallelism, dags, tasks, runs, tis, draining, drain_all)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(w=worlds(), max_tis=st.integers(1, 12), data=st.data())
def test_queue_tis_matches_the_greedy_model(eng, w, max_tis, data):
    load_world(eng, w)
    for _ in range(3):
        expected = greedy(w, max_tis)
        got = queue(eng, max_tis)
        assert sorted(got) == sorted(expected)
        by_id = {t.id: t for t in w.tis}
        for i in got:
            by_id[i].state = "queued"
        # Random completions free capacity before the next call.
        done = data.draw(st.sets(st.sampled_from([t.id for t in w.tis] or [0])))
        for i in done:
            if i in by_id and by_id[i].state in ("queued", "running", "deferred"):
                by_id[i].state = "success"
        with eng.begin() as c:
            c.execute(sa.text("UPDATE task_instance SET state = 'success' WHERE id IN :ids "
                              "AND state IN ('queued', 'running', 'deferred')")
                      .bindparams(sa.bindparam("ids", expanding=True)), {"ids": sorted(done)})
