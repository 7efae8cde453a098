"""Services for integration tests (DESIGN.md §11), shared by every test under this folder.

Each service comes from tests/service_plan.py's choice, printed in pytest's header: the
environment (`STEPWISE_TEST_KAFKA`, `STEPWISE_TEST_REDIS`), testcontainers (Apache Kafka and
Redis images) when a Docker engine answers or `STEPWISE_TEST_SERVICES=docker` asks for it (then
no engine is an error, not a fallback), else an embedded process on a free port. The same test
bodies run on every path.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import pytest_asyncio
import redis

from pipeline import schema
from pipeline.local import services
from pipeline.topics import STAGES, Topics
from pipeline.verify import tasks
from tests.service_plan import containers, session_plan

_HERE = Path(__file__).parent
TEST_PARTITIONS = 3  # >1, so per-partition ordering is exercised; small, so creation is quick


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if _HERE in Path(item.path).parents:
            item.add_marker(pytest.mark.integration)


@contextlib.contextmanager
def _docker_container(kind: str) -> Iterator[str]:
    """Address of a testcontainers Apache Kafka / Redis; a failure to start is an error."""
    kafka_cls, redis_cls = containers()
    container = kafka_cls() if kind == "kafka" else redis_cls()
    container.start()
    try:
        if kind == "kafka":
            yield container.get_bootstrap_server()
        else:
            host, port = container.get_container_host_ip(), container.get_exposed_port(6379)
            yield f"redis://{host}:{port}/0"
    finally:
        container.stop()


@contextlib.contextmanager
def _service(kind: str) -> Iterator[tuple[str, str]]:
    """(address, origin) where origin is "env", "docker" or "embedded"."""
    choice = session_plan()[kind]  # a ServicePlanError fails the session's first test loudly
    if choice.origin == "env":
        yield choice.address, "env"
    elif choice.origin == "docker":
        with _docker_container(kind) as addr:
            yield addr, "docker"
    else:
        embedded = services.EmbeddedKafka() if kind == "kafka" else services.EmbeddedRedis()
        with embedded:
            addr = embedded.bootstrap_servers if kind == "kafka" else embedded.url
            yield addr, "embedded"


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    with _service("kafka") as (bootstrap, _origin):
        yield bootstrap


@pytest.fixture(scope="session")
def group_options(kafka_bootstrap: str) -> dict[str, int]:
    """Consumer-group timeouts: short on Tansu, Kafka's minimum session (6 s) elsewhere."""
    found = asyncio.run(services.group_options_for(kafka_bootstrap))
    return found or {"session_timeout_ms": 6000, "heartbeat_interval_ms": 1000}


@pytest.fixture(scope="session")
def redis_url() -> Iterator[str]:
    with _service("redis") as (url, _origin):
        yield url


@pytest.fixture
def topics(kafka_bootstrap: str) -> Iterator[Topics]:
    """Fresh topics under a unique prefix, so tests never see each other's messages."""
    names = Topics(f"test.{uuid.uuid4().hex[:10]}.")
    counts = names.partitions(dict.fromkeys(STAGES, TEST_PARTITIONS))
    asyncio.run(services.create_topics(kafka_bootstrap, names.all(), counts))
    yield names
    asyncio.run(_delete_topics(kafka_bootstrap, names.all()))


async def _delete_topics(bootstrap: str, names: tuple[str, ...]) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        await admin.delete_topics(list(names), timeout_ms=5000)
    except Exception:  # best effort: a shared broker keeps a few stray test topics
        pass
    finally:
        await admin.close()


@pytest.fixture
def redis_prefix() -> str:
    """Key prefix owned by one test; its keys are deleted after the test."""
    return f"test:{uuid.uuid4().hex[:10]}:"


def _delete_prefix(url: str, prefix: str) -> None:
    import redis

    with redis.Redis.from_url(url, socket_timeout=5) as client:
        keys = list(client.scan_iter(match=prefix + "*", count=500))
        if keys:
            client.delete(*keys)


@pytest.fixture
def redis_client(redis_url: str, redis_prefix: str) -> Iterator[object]:
    """A sync `redis.Redis`; keys under `redis_prefix` are removed afterwards."""
    import redis

    client = redis.Redis.from_url(redis_url, socket_timeout=5)
    yield client
    client.close()
    _delete_prefix(redis_url, redis_prefix)


@pytest_asyncio.fixture
async def aredis_client(redis_url: str, redis_prefix: str):
    """A `redis.asyncio.Redis`; keys under `redis_prefix` are removed afterwards."""
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(redis_url, socket_timeout=5)
    yield client
    await client.aclose()
    _delete_prefix(redis_url, redis_prefix)


class VerifyWorker:
    """A real Celery verify worker (`stepwise worker verify`) on a given Redis."""

    def __init__(self, redis_url: str, log_path) -> None:
        self.redis_url = redis_url
        self.log = open(log_path, "ab")  # noqa: SIM115 (lives with the child)
        env = {**os.environ, "STEPWISE_REDIS": redis_url, "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pipeline.cli", "worker", "verify"],
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: a kill takes the pool children
        )

    def check(self, text: str, problem: str = "", timeout_s: float = 60.0):
        """One check through the queue; returns the VerdictMessage (None on timeout)."""
        stream = f"test:verdicts:{uuid.uuid4().hex[:10]}"
        req = schema.VerifyRequest(
            id="probe", key="0.1", step=0, text=text, problem=problem,
            reply_stream=stream, sent_ms=0,
        )  # fmt: skip
        tasks.send(req, tasks.make_app(self.redis_url))
        # redis-py 8 reads with a 5 s socket timeout by default: longer than a block would be
        with redis.Redis.from_url(self.redis_url, socket_timeout=timeout_s + 5) as r:
            got = r.xread({stream: "0"}, count=1, block=int(timeout_s * 1000))
            r.delete(stream)
        return schema.decode(got[0][1][0][1][b"v"], schema.VerdictMessage) if got else None

    def kill(self) -> None:

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

    def stop(self) -> None:

        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.kill()
        self.log.close()


@pytest.fixture(scope="session")
def verify_worker(redis_url: str, tmp_path_factory) -> Iterator[VerifyWorker]:
    """One Celery verify worker for the session; every pipeline test's decode checks with it."""
    worker = VerifyWorker(redis_url, tmp_path_factory.mktemp("celery") / "verify.log")
    try:
        assert worker.check("1 + 1 = 2") is not None, "the Celery verify worker did not answer"
        yield worker
    finally:
        worker.stop()
