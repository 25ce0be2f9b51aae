"""The floor of a queue_tis call: what any version must do whatever it decides, measured beside the
named query's call on one of bench_queue.py's worlds. Each round, every part committed:

  call   the named query's queue_tis call (its own session), then its TIs put back (a small or
         blocked world) or kept for the floor (a drain);
  empty  an empty transaction (SELECT 1): the round trip and the commit;
  fold   the queue lock and the fold the named query's call runs, alone (fold_usage_v1; on
         MySQL/MariaDB fold_usage_v2 since revision 0058): the usage the last round's moves left;
  write  bench_floor_write(ids): the lock, a fold (of nothing by now), and the final UPDATE of
         exactly the TIs the call queued, returned as queue_tis returns them; on MySQL/MariaDB
         with the usage appended by the statement after it, as queue_tis_v17+ do. Then those
         TIs are finished (a drain) or put back.

So call - (fold + write - empty) is what deciding costs: the pages, limits and walk. Every version
pays fold + write - empty, and the worlds' targets (docs/critical-section.md) are to be read
against it.

    python loadtests/baselines/floor.py URL WORLD ROUNDS
    WORLD: a number (a drain at max_tis 512), small or blockedN (bench_queue.make_world)

Prints each part's p50 and the floor's share of a call; ends with the usage counters checked
against a recount (usage_drift must be empty: the floor's UPDATE keeps them right)."""
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "loadtests"))
import sqlalchemy as sa  # noqa: E402

import bench_queue as bq  # noqa: E402
from engine import db  # noqa: E402

# The final UPDATE as queue_tis_v22 (PostgreSQL) and queue_tis_v19 (MySQL/MariaDB) write it.
FLOOR = {
    "postgresql": ["""
CREATE OR REPLACE FUNCTION bench_floor_write(p_ids bigint[])
RETURNS TABLE (ti_id bigint, dag_id text, run_id text, task_id text, map_index int, try_number int,
               pool text, queue text, executor text, priority_weight int)
LANGUAGE plpgsql SET jit = off AS $$
BEGIN
    PERFORM 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE NOWAIT;
    PERFORM set_config('synchronous_commit', 'off', true);
    PERFORM fold_usage_v1();
    RETURN QUERY
    WITH queued AS (
        UPDATE task_instance ti SET state = 'queued', queued_at = now(), queued_by_job_id = NULL, updated_at = now()
        WHERE ti.id = ANY (p_ids) AND ti.state = 'scheduled'
        RETURNING ti.id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, ti.pool, ti.queue,
                  ti.executor, ti.priority_weight, ti.run_after)
    SELECT q.id, q.dag_id, q.run_id, q.task_id, q.map_index, q.try_number, q.pool, q.queue, q.executor,
           q.priority_weight
    FROM queued q ORDER BY q.priority_weight DESC, q.run_after, q.map_index, q.id;
END $$"""],
    "mysql": ["DROP PROCEDURE IF EXISTS bench_floor_write", """
CREATE PROCEDURE bench_floor_write(IN p_ids LONGTEXT)
BEGIN
    DECLARE v_n INT;
    DECLARE v_now DATETIME(6) DEFAULT NOW(6);
    SELECT COUNT(*) INTO v_n FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE SKIP LOCKED;
    CALL fold_usage_v2(v_n);
    CREATE TEMPORARY TABLE IF NOT EXISTS bench_floor_acc (id BIGINT PRIMARY KEY);
    DELETE FROM bench_floor_acc;
    INSERT INTO bench_floor_acc SELECT j.id FROM JSON_TABLE(p_ids, '$[*]' COLUMNS (id BIGINT PATH '$')) j;
    SET @engine_usage_queued_at = v_now, @engine_usage_queued_by = NULL;
    UPDATE bench_floor_acc a STRAIGHT_JOIN task_instance ti ON a.id = ti.id
    SET ti.state = 'queued', ti.queued_at = v_now, ti.queued_by_job_id = NULL, ti.updated_at = v_now
    WHERE ti.state = 'scheduled';
    SET @engine_usage_queued_at = NULL, @engine_usage_queued_by = NULL;
    INSERT INTO usage_delta (dag_run_id, dag_id, task_id, pool, executor, n, slots)
    SELECT ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor, COUNT(*), SUM(ti.pool_slots)
    FROM bench_floor_acc a STRAIGHT_JOIN task_instance ti ON ti.id = a.id
    WHERE ti.state = 'queued' AND ti.queued_at = v_now AND ti.queued_by_job_id IS NULL
    GROUP BY ti.dag_run_id, ti.dag_id, ti.task_id, ti.pool, ti.executor;
    SELECT ti.id AS ti_id, ti.dag_id, ti.run_id, ti.task_id, ti.map_index, ti.try_number, ti.pool, ti.queue,
           ti.executor, ti.priority_weight
    FROM bench_floor_acc a STRAIGHT_JOIN task_instance ti ON ti.id = a.id
    WHERE ti.state = 'queued' AND ti.queued_at = v_now AND ti.queued_by_job_id IS NULL
    ORDER BY ti.priority_weight DESC, ti.run_after, ti.map_index, ti.id;
END"""],
}
FOLD = {"postgresql": ["SELECT 1 FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE NOWAIT",
                       "SELECT fold_usage_v1()"],
        "mysql": ["SELECT COUNT(*) INTO @bench_floor_n FROM scheduler_lock l WHERE l.name = 'queue_tis' FOR UPDATE SKIP LOCKED",
                  "CALL fold_usage_v2(@bench_floor_n)"]}
WRITE = {"postgresql": ("SELECT ti_id FROM bench_floor_write(:ids)", lambda ids: ids),
         "mysql": ("CALL bench_floor_write(:ids)", json.dumps)}


def main() -> int:
    url, world, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    eng = bq.bench_engine(url)
    dialect = db.dialect_dir(eng)
    made, max_tis = bq.make_world(eng, world)
    with eng.begin() as c:
        for stmt in FLOOR[dialect]:
            c.exec_driver_sql(stmt)
    print(f"set-up of {made}; a 10^7-iteration Python loop takes {bq.machine_speed()} s [load {bq.load()}]",
          flush=True)
    named, other = db.make_engine(url), db.make_engine(url)   # a session each
    sql, arg = WRITE[dialect]
    t = {k: [] for k in ("call", "empty", "fold", "write")}

    def timed(part, fn):
        t0 = time.perf_counter()
        out = fn()
        t[part].append((time.perf_counter() - t0) * 1000)
        return out

    def fold():
        with other.begin() as c:
            for stmt in FOLD[dialect]:
                c.exec_driver_sql(stmt)

    def write(ids):
        with other.begin() as c:
            return [r[0] for r in c.execute(sa.text(sql), {"ids": arg(ids)})]

    def empty():
        with other.begin() as c:
            c.exec_driver_sql("SELECT 1")

    sizes = []
    for _ in range(rounds):
        ids, _ = timed("call", lambda: bq.call(named, max_tis))
        if not ids:
            break
        sizes.append(len(ids))
        bq.set_state(eng, ids, "scheduled", clear_queued=True)
        timed("empty", empty)
        timed("fold", fold)
        got = timed("write", lambda: write(ids))
        if sorted(got) != sorted(ids):
            raise SystemExit(f"the floor queued {len(got)} TIs of the call's {len(ids)}: the world moved")
        bq.settle(eng, ids, max_tis)
    if len(sizes) < 5:
        raise SystemExit(f"{len(sizes)} rounds before the world ran dry: too few to measure")
    p50 = {k: statistics.median(v[3:]) for k, v in t.items()}   # (the first three: a session plans afresh)
    floor = p50["fold"] + p50["write"] - p50["empty"]
    print(f"{world}: {len(sizes) - 3} rounds, {statistics.median(sizes):.0f} TIs a call; p50 ms: call {p50['call']:.2f}, "
          f"empty {p50['empty']:.2f}, fold {p50['fold']:.2f}, write {p50['write']:.2f}; "
          f"floor (fold + write - empty) {floor:.2f} = {floor / p50['call']:.0%} of a call, "
          f"deciding {p50['call'] - floor:.2f} [load {bq.load()}]")
    with eng.begin() as c:
        drift = c.exec_driver_sql("SELECT count(*) FROM usage_drift").scalar()
        c.exec_driver_sql("DROP FUNCTION bench_floor_write(bigint[])" if dialect == "postgresql"
                          else "DROP PROCEDURE bench_floor_write")
    if drift:
        print(f"usage_drift has {drift} rows after the run: the floor's UPDATE left the counters wrong")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
