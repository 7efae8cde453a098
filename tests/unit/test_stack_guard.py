"""Stack.guard: a run fails at once when a worker process exits, instead of waiting out the
client's timeout; `wait_for_gateway`: `stepwise up` is ready once its gateway answers (real child
processes; no services are started)."""

import asyncio
import subprocess
import sys
import time

import pytest

from pipeline.config import PipelineConfig
from pipeline.errors import ServiceError
from pipeline.local.stack import Stack, gateway_healthy


def stack_with(tmp_path, **procs: str) -> Stack:
    stack = Stack(PipelineConfig(), workers=(), log_dir=tmp_path)
    stack.procs = {
        name: subprocess.Popen([sys.executable, "-c", code]) for name, code in procs.items()
    }
    return stack


def test_a_worker_that_exits_fails_the_run_at_once(tmp_path):
    stack = stack_with(tmp_path, decode="raise SystemExit(3)", ingest="import time; time.sleep(30)")
    t0 = time.monotonic()
    try:
        with pytest.raises(ServiceError, match="decode exited with code 3") as err:
            asyncio.run(stack.guard(asyncio.sleep(60), poll_s=0.1))
        assert err.value.code == "worker_exited"
        assert time.monotonic() - t0 < 20
        assert stack.exited() == {"decode": 3}
    finally:
        for proc in stack.procs.values():
            proc.kill()
            proc.wait()


def test_a_run_with_its_workers_alive_returns_its_result(tmp_path):
    stack = stack_with(tmp_path, decode="import time; time.sleep(30)")

    async def work() -> str:
        await asyncio.sleep(0.3)
        return "done"

    try:
        assert asyncio.run(stack.guard(work(), poll_s=0.05)) == "done"
    finally:
        stack.procs["decode"].kill()
        stack.procs["decode"].wait()


# -- `stepwise up` says "ready" once its gateway answers ----------------------------------------

HEALTHZ = """
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/healthz" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_all(stack: Stack) -> None:
    for proc in stack.procs.values():
        proc.kill()
        proc.wait()


def test_waiting_for_the_gateway_returns_once_it_answers(tmp_path, monkeypatch):
    # Asked where it is bound (a wildcard bind reached on loopback), never through a proxy the
    # environment names: a proxy that refuses everything changes nothing.
    monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{free_port()}")
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{free_port()}")
    for name in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(name, raising=False)
    port = free_port()
    stack = Stack(PipelineConfig(), workers=(), log_dir=tmp_path)
    stack.gateway_port, stack.gateway_host = port, "0.0.0.0"
    # The server starts listening a moment after its process: the wait spans that gap.
    stack.procs = {"gateway": subprocess.Popen([sys.executable, "-c", HEALTHZ, str(port)])}
    try:
        assert not gateway_healthy(free_port())  # nothing listens there
        stack.wait_for_gateway(timeout_s=30, poll_s=0.05)
        assert gateway_healthy(port) and gateway_healthy(port, "0.0.0.0")
        assert any(f"gateway at http://127.0.0.1:{port}" in line for line in stack.describe())
    finally:
        stop_all(stack)


@pytest.mark.parametrize(
    "code,timeout_s,error",
    [
        ("raise SystemExit(2)", 30, "gateway exited with code 2"),  # it died starting
        ("import time; time.sleep(30)", 0.3, "did not answer on port {port} in 0 s"),  # silent
    ],
)
def test_a_gateway_that_does_not_come_up_is_named(tmp_path, code, timeout_s, error):
    stack = stack_with(tmp_path, gateway=code)
    stack.gateway_port = free_port()
    try:
        with pytest.raises(ServiceError, match=error.format(port=stack.gateway_port)):
            stack.wait_for_gateway(timeout_s=timeout_s, poll_s=0.05)
    finally:
        stop_all(stack)
