"""`stepwise worker <name>` processes on given services and topics: started, killed, logged.

What the crash and fault tests and the fault bench share (tests/integration/test_crash_safety.py,
tests/integration/test_faults.py, bench/faults.py): real worker processes, each with its own
log file, that can be SIGKILLed as a host loss would kill them. `stepwise up`'s `Stack` starts
one process per worker and stops them gracefully; this starts as many as asked (a replacement
beside a killed one) and kills them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from pipeline import settings
from pipeline.stage.processes import spawned_children

# The settings every test stack runs its workers with: the bundled tiny model, in float32.
TEST_SETTINGS = {"MODEL": "tiny-reasoner", "DTYPE": "float32"}


class WorkerProcesses:
    """Worker processes sharing one Kafka, Redis and topic prefix; all killed at the end.

    `extra` settings (names without the STEPWISE_ prefix) go to every worker's environment.
    A verify worker (Celery, prefork) gets a process group of its own, so a kill takes its pool
    children with it."""

    def __init__(self, kafka: str, redis: str, prefix: str, log_dir: Path, **extra: object):
        self.env = settings.current().child_env(
            KAFKA=kafka, REDIS=redis, TOPIC_PREFIX=prefix, **{**TEST_SETTINGS, **extra}
        )
        # One engine thread each: the test machines have two cores for all of them.
        self.env.update(OMP_NUM_THREADS="1", PYTHONPATH=os.getcwd())
        self.log_dir = Path(log_dir)
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self.procs: list[tuple[str, subprocess.Popen]] = []

    def start(self, name: str, wrap: Sequence[str] = (), **overrides: object) -> subprocess.Popen:
        """Start one `stepwise worker NAME`; `wrap`: a command it runs under (a namespace of
        its own, say), `overrides`: settings for this one (names without STEPWISE_)."""
        log = open(self.log_dir / f"{name}-{len(self.procs)}.log", "wb")  # noqa: SIM115
        env = {**self.env, **{f"STEPWISE_{k}": str(v) for k, v in overrides.items()}}
        with log:  # the child holds its own descriptor
            proc = subprocess.Popen(
                [*wrap, sys.executable, "-m", "pipeline.cli", "worker", name],
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=name == "verify",
            )
        self.procs.append((name, proc))
        return proc

    def live(self, name: str) -> list[subprocess.Popen]:
        """This kind's processes still running, oldest first."""
        return [p for n, p in self.procs if n == name and p.poll() is None]

    def kill(self, proc: subprocess.Popen) -> None:
        """SIGKILL, as a lost host would: the process, and a verify worker's pool with it."""
        if proc.poll() is not None:
            return
        if os.getpgid(proc.pid) == proc.pid:  # a group of its own (verify): all of it
            os.killpg(proc.pid, signal.SIGKILL)
        else:
            proc.kill()
        proc.wait(timeout=30)

    def stop_all(self) -> None:
        for _, proc in self.procs:
            self.kill(proc)

    def logs(self, tail: int = 3000) -> str:
        """The end of every worker's log, for a failing test's message."""
        return "\n".join(
            f"--- {f.name}\n{f.read_text(errors='replace')[-tail:]}"
            for f in sorted(self.log_dir.glob("*.log"))
        )


def engine_core_pid(worker: subprocess.Popen, timeout_s: float = 60) -> int:
    """Decode's engine core: the process its worker started with multiprocessing."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cores := spawned_children(worker.pid):
            return cores[0]
        time.sleep(0.1)
    raise AssertionError("the decode worker started no engine core process")


def gone(pid: int, timeout_s: float = 10) -> bool:
    """True once `pid` has exited (a zombie not yet reaped counts) within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] == "Z":  # dead, not yet reaped
                    return True
        except FileNotFoundError:
            return True
        time.sleep(0.05)
    return False
