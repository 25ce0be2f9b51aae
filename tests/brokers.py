"""The message brokers of the celery executor's tests: RabbitMQ (amqp://guest:guest@127.0.0.1:5672//)
and Redis (redis://127.0.0.1:6379). Each test gets its own queue-name prefix (and Redis database
ENGINE_TEST_REDIS_DB, default 11), so runs in parallel never take each other's messages. A broker
that does not answer skips the test with the reason, or fails it when CI is set (CI=true:
.ci/run starts both brokers first)."""
from __future__ import annotations

import itertools
import os
import socket

import pytest

RABBITMQ_URL = os.environ.get("ENGINE_TEST_RABBITMQ_URL", "amqp://guest:guest@127.0.0.1:5672//")
REDIS_URL = os.environ.get("ENGINE_TEST_REDIS_URL",
                           f"redis://127.0.0.1:6379/{os.environ.get('ENGINE_TEST_REDIS_DB', '11')}")
URLS = {"rabbitmq": RABBITMQ_URL, "redis": REDIS_URL}
_n = itertools.count()


def answers(url: str, timeout: float = 3.0) -> str | None:
    """None when the broker at url accepts a connection, else why not."""
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=timeout) as conn:
            conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0, timeout=timeout)
        return None
    except Exception as exc:  # noqa: BLE001 - any failure means: not usable
        return f"{type(exc).__name__}: {exc}"


def broker_or_skip(kind: str) -> str:
    url = URLS[kind]
    why = answers(url)
    if why is not None:
        message = f"{kind} broker at {url} does not answer ({why}); start it (.ci/run does)"
        if os.environ.get("CI", "").lower() not in ("", "0", "false", "no"):
            pytest.fail(message)
        pytest.skip(message)
    return url


def celery_env(kind: str, url: str) -> dict:
    """Settings of the processes of one test: its broker, its own queue prefix, quick re-sends."""
    prefix = f"t{os.getpid()}x{next(_n)}x{socket.gethostname()[:8]}_"
    return {"ENGINE_CELERY_BROKER_URL": url, "ENGINE_CELERY_QUEUE_PREFIX": prefix,
            "ENGINE_DISPATCH_RESEND_TIMEOUT": "8", "ENGINE_DISPATCH_INTERVAL": "0.1"}


def delete_queues(url: str, names) -> None:
    """Best effort: remove a test's queues from the broker (RabbitMQ keeps durable queues)."""
    from kombu import Connection

    try:
        with Connection(url, connect_timeout=3) as conn:
            channel = conn.default_channel
            for name in names:
                try:
                    channel.queue_delete(name)
                except Exception:  # noqa: BLE001 - not there: nothing to remove
                    channel = conn.channel()
    except Exception:  # noqa: BLE001 - broker gone: nothing to clean
        pass


class PrivateRedis:
    """A redis-server of the test's own on a free port (as .ci/run starts the shared one:
    no persistence), so a test can restart it without disturbing anyone: a restart loses every
    message, as a crash of a Redis without persistence does."""

    def __init__(self):
        import shutil
        import subprocess

        if shutil.which("redis-server") is None:
            raise RuntimeError("redis-server is not installed")
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._subprocess = subprocess
        self.proc = None
        self.start()

    def start(self) -> None:
        import time

        self.proc = self._subprocess.Popen(
            ["redis-server", "--bind", "127.0.0.1", "--port", str(self.port), "--save", "", "--appendonly", "no"],
            stdout=self._subprocess.DEVNULL, stderr=self._subprocess.DEVNULL)
        end = time.monotonic() + 30
        while answers(self.url, timeout=1) is not None:
            if time.monotonic() > end:
                raise RuntimeError(f"redis-server on port {self.port} did not start")
            time.sleep(0.1)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)
        self.proc = None


def restart_rabbitmq() -> None:
    """rabbitmqctl stop_app, start_app: every connection drops; durable queues and persistent
    messages stay."""
    import subprocess

    for step in ("stop_app", "start_app"):
        subprocess.run(["rabbitmqctl", step], check=True, capture_output=True, timeout=120)
