"""Stack.guard: a run fails at once when a worker process exits, instead of waiting out the
client's timeout (real child processes; no services are started)."""

import asyncio
import subprocess
import sys
import time

import pytest

from pipeline.config import PipelineConfig
from pipeline.errors import ServiceError
from pipeline.local.stack import Stack


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
