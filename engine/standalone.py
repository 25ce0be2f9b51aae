"""`engine standalone`: the local executor. One command runs everything a one-host install
needs: `engine scheduler`, `engine triggerer` and `engine worker` (which runs each try in a
subprocess under its supervisor), as child processes of this one. They share the database the
parent resolved (the embedded PostgreSQL is started once, here). A service that exits is
started again after RESTART_DELAY; SIGTERM/SIGINT stops them all (each finishes as it does
alone: the worker waits for running tries up to worker_shutdown_timeout, then hands them back).
"""
from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time

log = logging.getLogger("engine.standalone")
RESTART_DELAY = 1.0
SERVICES = ("scheduler", "triggerer", "worker")


def run(database_url: str, worker_args: list[str], env: dict | None = None, config_path: str | None = None) -> int:
    base = [sys.executable, "-m", "cli.main"] + (["--config", config_path] if config_path else []) + \
        (["-v"] if logging.getLogger().isEnabledFor(logging.INFO) else [])  # the services log as this one
    env = {**(os.environ if env is None else env), "ENGINE_DATABASE_URL": database_url}
    argv = {name: base + [name] + (worker_args if name == "worker" else []) for name in SERVICES}
    procs: dict[str, subprocess.Popen] = {}
    stopping = []

    def _stop(signum, frame):
        stopping.append(signum)
        for p in procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGTERM if len(stopping) == 1 else signal.SIGKILL)
    saved = {s: signal.signal(s, _stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        for name in SERVICES:
            procs[name] = subprocess.Popen(argv[name], env=env)
            log.info("started %s (pid %s)", name, procs[name].pid)
        while not stopping:
            for name, p in list(procs.items()):
                code = p.poll()
                if code is not None and not stopping:
                    log.warning("%s (pid %s) exited with %s; starting it again in %g s", name, p.pid, code,
                                RESTART_DELAY)
                    time.sleep(RESTART_DELAY)
                    if not stopping:
                        procs[name] = subprocess.Popen(argv[name], env=env)
            time.sleep(0.2)
        codes = {name: p.wait() for name, p in procs.items()}
        log.info("stopped: %s", ", ".join(f"{n} exit {c}" for n, c in codes.items()))
        return 0 if all(c == 0 for c in codes.values()) else 1
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        for sig, handler in saved.items():
            signal.signal(sig, handler)
