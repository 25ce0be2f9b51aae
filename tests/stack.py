"""The services of an end-to-end test on the test's database: one Scheduler, one Worker (real
tries in subprocesses) and one Triggerer, stepped by the test (`stack` fixture), and the
module of task callables and triggers their DAGs use (SEEDTASKS, written as seedtasks.py next
to the DAG file). Tasks wait on marker files the test writes, never on time."""
from __future__ import annotations

import asyncio

import pytest

from engine.config import load_config
from engine.scheduler import Scheduler
from engine.triggerer import Triggerer
from engine.worker import Worker
from tests.helpers import sql, sync_source, until

SEEDTASKS = '''
import asyncio
import os
import signal
import time
from pathlib import Path

from engine import Defer
from engine.triggers import BaseTrigger


class FileTrigger(BaseTrigger):
    """Fires once `path` exists."""
    def __init__(self, path):
        self.path = path

    async def run(self):
        while not os.path.exists(self.path):
            await asyncio.sleep(0.05)
        return {"seen": self.path}


def wait(path):
    raise Defer(trigger=FileTrigger(path), method="resume", kwargs={"progress": 7})


def resume(event, progress):
    return {"progress": progress, "event": event}


def block(path, **_):
    """A try that runs until `path` exists."""
    while not os.path.exists(path):
        time.sleep(0.05)


def steady(started, fire):
    """Works in steps until `fire` exists; on SIGTERM (a preemption) it defers, keeping how
    far it got: the resume goes on from there once `fire` exists."""
    step = 0

    def on_sigterm(signum, frame):
        raise Defer(trigger=FileTrigger(fire), method="go_on", kwargs={"step": step})
    signal.signal(signal.SIGTERM, on_sigterm)
    Path(started).write_text("handler installed")
    while not os.path.exists(fire):
        step += 1
        time.sleep(0.02)
    return {"steps": step, "resumed": False}


def go_on(event, step):
    return {"steps": step, "resumed": True}
'''


class Stack:
    """One scheduler, one worker and one triggerer (its triggers run in this event loop between
    passes) on the test's database; step() is one pass of each."""

    def __init__(self, eng, tmp_path, source: str, **settings):
        folder = tmp_path / "dags"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "seedtasks.py").write_text(SEEDTASKS)
        sync_source(eng, folder, source)
        sql(eng, "UPDATE dag SET is_paused = false")
        self.eng, self.tmp = eng, tmp_path
        self.cfg = load_config({"database_url": eng.url.render_as_string(hide_password=False),
                                "home": str(tmp_path / "home"), "heartbeat_interval": 0.2, **settings})
        self.sched, self.worker = Scheduler(eng, self.cfg), Worker(eng, self.cfg, concurrency=8)
        self.triggerer, self.aio = Triggerer(eng, self.cfg), asyncio.new_event_loop()

    def step(self) -> None:
        self.sched.run_once()
        self.worker.run_once()
        self.aio.run_until_complete(self.triggerer.run_once())
        self.aio.run_until_complete(asyncio.sleep(0.02))

    def until(self, done, what: str) -> None:
        until(self.step, done, what)

    def close(self) -> None:
        self.worker.stop(timeout=5)
        self.sched.stop()
        self.aio.run_until_complete(self.triggerer.stop())
        self.aio.close()


@pytest.fixture
def stack(eng, tmp_path):
    made = []

    def make(source: str, **settings) -> Stack:
        made.append(Stack(eng, tmp_path, source, **settings))
        return made[-1]
    yield make
    for s in made:
        s.close()
