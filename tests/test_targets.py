"""loadtests/targets.py judges issue 11's targets from the benchmarks' results: its thresholds and
ratios, checked on made-up results (no database; the benchmarks themselves are not tests)."""
import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("targets", Path(__file__).parent.parent / "loadtests" / "targets.py")
targets = importlib.util.module_from_spec(spec)
spec.loader.exec_module(targets)


def result(dialect, small, b5, b500, d100, p100, d1m, fire_p99, fire_n=10000, surge=5.0):
    lat = lambda p50: {"latency": {"p50_ms": p50, "p99_ms": p50 * 3}}  # noqa: E731
    queue = {"server": f"{dialect} server", "loop_10m_s": 0.3, "small": lat(small),
             "blocked": {"5000": lat(b5), **({"500000": lat(b500)} if b500 is not None else {})},
             "sizes": {"100000": {"drain": {"tis_per_s_in_queue_tis": d100, "p50_ms": p100}},
                       **({"1000000": {"drain": {"tis_per_s_in_queue_tis": d1m, "p50_ms": 99}}} if d1m else {})},
             "surge": {"drain": {"seconds": surge, "p50_ms": 30}}}
    trig = {"runs": [{"triggers": fire_n, "fire_to_queued_ms": {"p50": fire_p99 / 2, "p99": fire_p99}}]}
    return {"dialect": dialect, "server": f"{dialect} server", "loop_10m_s": 0.3, "db_loop_1m_ms": 90.0,
            "load_start": [0.1], "load_end": [0.2], "queue": queue, "triggers": trig}


def met(rows):
    return [m for _, _, m in rows]


def test_each_threshold_met_and_missed():
    good = targets.figures(result("postgresql", 3, 5, 10, 20000, 25, 10000, 1000))
    assert met(targets.verdicts(good, full=True)) == [True, True, True, True, True, True, None]
    bad = targets.figures(result("postgresql", 3.1, 5.1, 10.3, 19999, 25, 9000, 1000.1))
    assert met(targets.verdicts(bad, full=True)) == [False, False, False, False, False, False, None]
    # throughput met but its p50 not: target 3 is both
    slow = targets.figures(result("postgresql", 3, 5, 10, 25000, 25.1, 20000, 10))
    assert met(targets.verdicts(slow, full=True))[3] is False
    # the drain's body (calls that queued 512) is shown beside the judged figure, not judged
    body = result("postgresql", 3, 5, 10, 19000, 25, 10000, 1000)
    body["queue"]["sizes"]["100000"]["drain"]["tis_per_s_full_calls"] = 21000
    rows = targets.verdicts(targets.figures(body), full=True)
    assert rows[3][1] == "19,000 TIs/s, p50 25 ms (21,000/s in the calls that queued 512)" and rows[3][2] is False


def test_fewer_triggers_or_missing_worlds_judge_nothing():
    f = targets.figures(result("postgresql", 1, 1, None, 30000, 10, None, 10, fire_n=2000))
    rows = targets.verdicts(f, full=True)
    assert met(rows)[2] is None and "not run" in rows[2][1]   # no 500,000 world
    assert met(rows)[4] is None and "not run" in rows[4][1]   # no 1M world
    assert met(rows)[5] is False                              # 2,000 triggers are not the target's 10,000
    assert set(met(targets.verdicts(f, full=False))) == {None}  # --quick judges nothing


def test_mariadb_against_postgresql():
    pg = targets.figures(result("postgresql", 8, 7, 7, 12000, 40, 2000, 500))
    my = targets.figures(result("mysql", 16, 15, 30, 6000, 80, 900, 900))
    rows = targets.ratio_rows(pg, my)
    assert [(t.split(":")[0], text, m) for t, text, m in rows] == [
        ("4. 1. small passes p50", "2.00x", True), ("4. 2. 5,000 blocked p50", "2.14x", False),
        ("4. 2. 500,000 blocked p50", "4.29x", False), ("4. 3. drain 100k TIs/s", "2.00x", True),
        ("4. 3. drain 1M TIs/s", "2.22x", False)]
    text = targets.table([result("postgresql", 8, 7, 7, 12000, 40, 2000, 500),
                          result("mysql", 16, 15, 30, 6000, 80, 900, 900)], full=True)
    assert "| 1. small passes: p50 <= 3 ms | 8 ms (p99 24 ms) not met | 16 ms (p99 48 ms) not met |" in text
    assert "database 10^6 loop 90.0 ms" in text
    no_block = result("mysql", 16, 15, 30, 6000, 80, 900, 900)
    no_block["db_loop_1m_ms"] = None   # MySQL 8: no compound statement outside a stored program
    assert "mysql server: Python 10^7 loop 0.3 s, database 10^6 loop n/a;" in targets.table([no_block], full=True)


def test_a_benchmark_that_stops_stops_the_run_in_one_line(tmp_path):
    """A benchmark that exits non-zero (here: a URL of no database at all) ends targets.py with its
    own error and one line naming it, exit status 1, and no traceback."""
    import subprocess
    import sys
    done = subprocess.run([sys.executable, str(Path(__file__).parent.parent / "loadtests" / "targets.py"),
                           "--postgresql", "postgresql+psycopg://nobody@127.0.0.1:1/none", "--quick",
                           "--out", str(tmp_path / "t.json")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr + done.stdout
    assert "error: loadtests/bench_queue.py stopped with exit status 1" in done.stderr
    assert not (tmp_path / "t.json").exists()
