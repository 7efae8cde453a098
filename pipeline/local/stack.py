"""`stepwise up`: the whole pipeline on one machine, embedded services where none are given."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from pipeline import settings
from pipeline.config import PipelineConfig
from pipeline.errors import ServiceError
from pipeline.gateway.config import GATEWAY_HOST, GATEWAY_PORT
from pipeline.local.services import LocalServices, child_setup, create_topics
from pipeline.models.resolve import resolve_model
from pipeline.topics import Topics
from pipeline.vllm.server import VLLMServer, VLLMServerConfig

WORKERS = ("ingest", "prefill", "decode", "verify", "budget", "gateway")
# The processes that run no model and no checks: on one machine they share its cores with the
# engine workers, and at saturation they took a core's turns from decode's engine thread (a
# thread waiting for a core is a step not run). They run `service_nice` steps lower: when the
# cores are free that changes nothing; when they are not, the model comes first.
NICED = ("kafka", "redis", "ingest", "budget", "gateway")
T = TypeVar("T")


@settings.declared
@dataclass(frozen=True, slots=True)
class StackConfig:
    """How `stepwise up` runs the processes it starts."""

    service_nice: int = settings.setting(
        10, env="SERVICE_NICE", concern="services",
        help="`stepwise up`: niceness of the non-model processes (0: all alike)",
    )  # fmt: skip


class Stack:
    """Services (embedded unless named by env) + topics + one process per worker."""

    def __init__(
        self,
        config: PipelineConfig,
        workers: tuple[str, ...] = WORKERS,
        log_dir=None,
        service_nice: int | None = None,
    ):
        """`service_nice`: niceness of the NICED processes over this one's
        (default STEPWISE_SERVICE_NICE, else 10; 0 runs everything alike)."""
        self.config = config
        self.workers = workers
        self.settings = settings.current()
        if service_nice is None:
            service_nice = settings.build(StackConfig, self.settings).service_nice
        self.service_nice = max(0, service_nice)
        self.services = LocalServices(
            kafka=config.kafka, redis=config.redis, log_dir=log_dir, nice=self.service_nice
        )
        self.procs: dict[str, subprocess.Popen] = {}
        self.log_dir = Path(log_dir) if log_dir else None
        self.gateway_port = self.settings[GATEWAY_PORT]
        self.gateway_host = self.settings[GATEWAY_HOST]
        self.vllm = None  # engine vllm without a URL: one server, shared by prefill and decode

    @property
    def env(self) -> dict[str, str]:
        """Each worker's environment: this process's settings written out, and the stack's own
        choices over them (where the services are, the model, the engine)."""
        return self.settings.child_env(
            KAFKA=self.services.bootstrap_servers,
            REDIS=self.services.redis_url,
            TOPIC_PREFIX=self.config.topic_prefix,
            MODEL=self.config.model,
            REASONING_FORMAT=self.config.reasoning_format,
            DTYPE=self.config.dtype,
            GATEWAY_PORT=self.gateway_port,
            ENGINE=self.config.engine,
            VLLM_URL=self.config.vllm_url,
        )

    def start(self) -> None:
        self.services.start()
        if self.config.engine == "vllm" and not self.config.vllm_url:
            self.start_vllm()
        topics = Topics(self.config.topic_prefix)
        parts = topics.partitions()
        asyncio.run(create_topics(self.services.bootstrap_servers, list(parts), parts))
        for name in self.workers:
            self.start_worker(name)

    def start_vllm(self) -> None:
        """One vLLM server for the stack (prefill warms its prefix cache, decode hits it)."""
        dtype = "float32" if self.config.dtype == "auto" else self.config.dtype
        log = self.log_dir / "vllm.log" if self.log_dir else None
        server_config = VLLMServerConfig(
            str(resolve_model(self.config.model)), dtype=dtype, structured_outputs=True
        )
        self.vllm = VLLMServer(server_config, log).start()
        self.config.vllm_url = self.vllm.url

    def start_worker(self, name: str) -> subprocess.Popen:
        out = None
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (lives with the child)
        proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "worker", name],
            env=self.env,
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
            # Not tied to our life (as the services are): a worker drains on its own SIGTERM.
            preexec_fn=child_setup(self.service_nice if name in NICED else 0, False),
        )
        self.procs[name] = proc
        return proc

    def exited(self) -> dict[str, int]:
        """Workers that have stopped, with their exit codes."""
        return {n: p.returncode for n, p in self.procs.items() if p.poll() is not None}

    async def guard(self, work: Awaitable[T], poll_s: float = 1.0) -> T:
        """`work`, failed at once (ServiceError) if a worker exits meanwhile: a worker that died
        at start would otherwise leave a client waiting out its own timeout (found on the
        first GPU run, 2026-12-04: every worker failed to import, the bench waited 300 s)."""
        task = asyncio.ensure_future(work)
        while not task.done():
            await asyncio.wait({task}, timeout=poll_s)
            dead = self.exited()
            if dead and not task.done():
                task.cancel()
                codes = ", ".join(f"{n} exited with code {c}" for n, c in dead.items())
                raise ServiceError(
                    f"worker stopped during the run: {codes}{self._logs()}", code="worker_exited"
                )
        return task.result()

    def wait_for_gateway(self, timeout_s: float = 120.0, poll_s: float = 0.25) -> None:
        """Block until the stack's gateway answers `/healthz`: `stepwise up` says "ready" only
        once a client can connect. A worker that exits meanwhile, or a gateway still silent
        after `timeout_s`, is a ServiceError naming it."""
        deadline = time.monotonic() + timeout_s
        while not gateway_healthy(self.gateway_port, self.gateway_host):
            if dead := self.exited():
                codes = ", ".join(f"{n} exited with code {c}" for n, c in dead.items())
                raise ServiceError(f"worker stopped while starting: {codes}{self._logs()}")
            if time.monotonic() > deadline:
                raise ServiceError(
                    f"the gateway did not answer on port {self.gateway_port} in "
                    f"{timeout_s:.0f} s{self._logs()}"
                )
            time.sleep(poll_s)

    def _logs(self) -> str:
        return f" (logs in {self.log_dir})" if self.log_dir else ""

    def describe(self) -> list[str]:
        lines = self.services.describe()
        if self.config.engine == "vllm":
            lines.append(f"engine   vllm at {self.config.vllm_url}")
        where = f", log {self.log_dir}/<name>.log" if self.log_dir else ""
        lines += [f"worker {n:<8} pid {p.pid}{where}" for n, p in self.procs.items()]
        if self.service_nice:
            names = [s.name for s in self.services.embedded] + [n for n in NICED if n in self.procs]
            niced = ", ".join(names)
            lines.append(f"nice +{self.service_nice}: {niced} (STEPWISE_SERVICE_NICE=0: off)")
        if "gateway" in self.procs:
            url = gateway_url(self.gateway_host, self.gateway_port)
            lines.append(f"gateway at {url} (OpenAI API: /v1)")
        return lines

    def stop(self, timeout: float = 60.0) -> None:
        """SIGTERM every worker (each drains: up to drain_timeout_s, then leaves its group),
        wait up to `timeout` in all, kill what is left."""
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)  # drain, then exit
        deadline = time.monotonic() + timeout
        for name, proc in self.procs.items():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                print(f"worker {name} did not stop in {timeout:.0f} s: killed", file=sys.stderr)
                proc.kill()
                proc.wait(10)
        if self.vllm is not None:
            self.vllm.stop()
        self.services.stop()

    def __enter__(self) -> Stack:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


_WILDCARDS = {"": "127.0.0.1", "0.0.0.0": "127.0.0.1", "::": "::1"}
_DIRECT = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def gateway_url(host: str, port: int) -> str:
    """Where this machine reaches a gateway bound to `host`:`port` (a wildcard address is
    reached on loopback)."""
    host = _WILDCARDS.get(host, host)
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def gateway_healthy(port: int, host: str = "127.0.0.1") -> bool:
    """Does a gateway bound to `host`:`port` answer `/healthz` with 200 (its Kafka feed
    running)? Asked directly, never through an HTTP proxy the environment names."""
    try:
        with _DIRECT.open(f"{gateway_url(host, port)}/healthz", timeout=2) as r:
            return r.status == 200
    except OSError:  # not listening yet, or 503 (HTTPError is an OSError)
        return False
