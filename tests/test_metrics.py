"""The /metrics endpoint a service cannot serve (its port taken, metrics_host no address of this
host) stops the service before it starts, in one line naming the address and the fix."""
from __future__ import annotations

import socket
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from cli.main import main
from engine import metrics
from engine.errors import EngineError
from engine.jobs import Job
from tests.helpers import sql


@pytest.fixture
def taken_port():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.mark.parametrize("host, needle", [
    ("0.0.0.0", "pick another --metrics-port / metrics_port"),
    ("no.such.host.invalid", "set metrics_host (ENGINE_METRICS_HOST)"),
])
def test_serve_refuses_an_address_it_cannot_bind_in_one_line(taken_port, host, needle):
    cfg = SimpleNamespace(metrics_port=taken_port, metrics_host=host)
    with pytest.raises(EngineError) as err:
        metrics.serve(cfg, None, Job(None, "worker"), "worker")
    assert str(err.value).startswith(f"cannot serve metrics on {host}:{taken_port} (") and needle in str(err.value)
    assert "\n" not in str(err.value)


def test_services_with_a_taken_metrics_port_exit_in_one_line_and_register_no_job(db_url, eng, taken_port):
    for args in (["scheduler", "--max-ticks", "1"], ["worker", "--burst"], ["triggerer"]):
        r = CliRunner().invoke(main, ["--database-url", db_url, *args, "--metrics-port", str(taken_port)])
        assert r.exit_code == 1, (args, r.output)
        assert r.output.strip() == (f"error: cannot serve metrics on 0.0.0.0:{taken_port} (Address already in use); "
                                    "pick another --metrics-port / metrics_port"), (args, r.output)
    assert sql(eng, "SELECT count(*) FROM job")[0][0] == 0
