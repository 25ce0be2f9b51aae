"""Where a MySQL/MariaDB queue_tis call spends its time, statement by statement: MariaDB has no
auto_explain for the statements of a procedure, so this installs a copy of the procedure in FILE
(under the name queue_tis_v98) with a timing assignment after every statement, runs it on one of
bench_queue.py's worlds as commit_ab.py does (every call committed; a drain's TIs finished, a small
or blocked world's put back), and prints the milliseconds a call spent up to each point since the
one before (statements in a loop add up; an IF's condition counts to the statement after it).
(`engine db explain queue_tis` shows one rolled-back call, and MariaDB's profiler keeps only its
last 100 statements; a drain call runs several hundred.)

    python loadtests/baselines/mysql_profile.py URL WORLD WARM CALLS FILE.sql
    e.g. ... mysql+pymysql://root@127.0.0.1:3306/bench_q 100000 5 40 sql/mysql/queue_tis_v24.sql

The timing itself costs ~30-50 us a point passed (one SET of user variables, SYSDATE(6)): compare
lines with each other and copies with copies, not with an uninstrumented call. A point is left out
where the next statement is a DECLARE or reads ROW_COUNT() or GET DIAGNOSTICS (a SET would reset
them), and inside a DECLARE (a handler's body). Only lines of at least 0.3 ms a call are printed."""
import re
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


def code(line: str) -> str:
    return line.split("--")[0].rstrip()


def instrument(lines: list[str]) -> tuple[str, list[int]]:
    """The procedure's text with a timing point after each statement, and the points' line numbers."""
    def next_statement(i: int) -> str:
        words = []
        for line in lines[i + 1:]:
            c = code(line).strip()
            if c:
                words.append(c)
                if c.endswith(";"):
                    break
        return " ".join(words).upper()

    out, points, in_declare, depth = [], [], False, 0
    for i, line in enumerate(lines):
        out.append(line)
        c = code(line).strip()
        if not c:
            continue
        if not in_declare and c.upper().startswith("DECLARE"):
            in_declare, depth = True, 0
        if in_declare:   # (a handler's BEGIN ... END belongs to its DECLARE)
            depth += (len(re.findall(r"\bBEGIN\b", c, re.I))
                      - len(re.findall(r"\bEND\b(?!\s+(IF|WHILE|LOOP|CASE|REPEAT))", c, re.I)))
            in_declare = not (c.endswith(";") and depth <= 0)
            continue
        nxt = next_statement(i)
        if (not c.endswith(";") or nxt.startswith("DECLARE") or "ROW_COUNT" in nxt
                or "GET DIAGNOSTICS" in nxt):
            continue
        points.append(i + 1)
        out.append(f"SET @pn = SYSDATE(6), @p_{i + 1} = COALESCE(@p_{i + 1}, 0) "
                   f"+ TIMESTAMPDIFF(MICROSECOND, @pt, @pn), @pt = @pn;")
    text = "\n".join(out)
    return re.sub(r"CREATE PROCEDURE \w+\(", "CREATE PROCEDURE queue_tis_v98(", text, count=1), points


def main() -> None:
    url, world, warm, calls, path = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    lines = Path(path).read_text().splitlines()
    text, points = instrument(lines)
    eng = bq.bench_engine(url)
    if db.dialect_dir(eng) != "mysql":
        raise SystemExit("URL: a MySQL/MariaDB database (PostgreSQL has auto_explain)")
    copy = Path("/tmp") / f"mysql_profile_{Path(path).stem}.sql"
    copy.write_text(text)
    bq.install_prototypes(eng, [str(copy)])
    made, max_tis = bq.make_world(eng, world)
    print(f"set-up of {made}; a 10^7-iteration Python loop takes {bq.machine_speed()} s [load {bq.load()}]")
    total = dict.fromkeys(points, 0)
    times = []
    with eng.connect() as c:
        for k in range(warm + calls):
            c.exec_driver_sql("SET " + ", ".join(f"@p_{n} = 0" for n in points) + ", @pt = SYSDATE(6)")
            t0 = time.perf_counter()
            ids = [r[0] for r in c.execute(sa.text("CALL queue_tis_v98(:m, NULL, NULL, 2)"), {"m": max_tis})]
            c.commit()
            dt = time.perf_counter() - t0
            spent = c.exec_driver_sql("SELECT " + ", ".join(f"@p_{n}" for n in points)).one()
            c.commit()
            if k >= warm:
                times.append(dt)
                for n, us in zip(points, spent):
                    total[n] += us or 0
            bq.settle(eng, ids, max_tis)
    print(f"{Path(path).name} instrumented: call p50 {statistics.median(times) * 1000:.1f} ms, "
          f"{sum(total.values()) / calls / 1000:.1f} ms a call at the points [load {bq.load()}]")
    for n in points:
        ms = total[n] / calls / 1000
        if ms >= 0.3:
            print(f"{ms:8.2f} ms  line {n}: {lines[n - 1].strip()[:90]}")


if __name__ == "__main__":
    main()
