"""Broker administration the stages and the local stack share: topics, and consumer-group
options that suit the broker (the embedded Tansu's quirks: pipeline/local/embedded.py)."""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from collections.abc import Iterable, Mapping

from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from pipeline.errors import ServiceError

CLUSTER_ID = "stepwise-local"  # the embedded broker's
TANSU_CLUSTER_IDS = (CLUSTER_ID, "tansu_cluster")  # ours, and tansu's default
# Consumer settings for the embedded broker (pipeline/local/embedded.py says why).
EMBEDDED_FETCH_MAX_WAIT_MS = 10
# Tansu holds a join for about half the session timeout, so short sessions make start-up and
# fail-over fast; 3 s still leaves room for a worker whose event loop is briefly busy.
EMBEDDED_GROUP_OPTIONS = {"session_timeout_ms": 3000, "heartbeat_interval_ms": 500}
_TOPIC_ALREADY_EXISTS = 36


def kafka_metadata_answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """True when a Kafka MetadataRequest v0 gets an answer that lists at least one broker."""
    client_id = b"stepwise-probe"
    # header: api_key=3 (Metadata), api_version=0, correlation_id, client_id; body: no topics
    body = struct.pack(">hhih", 3, 0, 7, len(client_id)) + client_id + struct.pack(">i", 0)
    try:
        with socket.create_connection((host, port), timeout=timeout) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = _recv_exact(s, 12)  # size, correlation_id, broker count
    except OSError:
        return False
    if head is None:
        return False
    _, correlation_id, num_brokers = struct.unpack(">iii", head)
    return correlation_id == 7 and num_brokers >= 1


def _recv_exact(s: socket.socket, n: int) -> bytes | None:
    buf = b""
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            return None
        buf += chunk
    return buf


async def create_topics(
    bootstrap: str,
    names: Iterable[str],
    partitions: int | Mapping[str, int] = 1,
    *,
    replication_factor: int = 1,
    timeout: float = 10.0,
) -> None:
    """Create topics that do not exist yet and wait until metadata lists them all."""
    names = list(names)
    counts = partitions if isinstance(partitions, Mapping) else dict.fromkeys(names, partitions)
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(timeout * 1000))
    await admin.start()
    try:
        new = [NewTopic(n, counts[n], replication_factor) for n in names]
        response = await admin.create_topics(new, timeout_ms=int(timeout * 1000))
        failed = [
            f"{err[0]}: error {err[1]} {err[2] if len(err) > 2 else ''}"
            for err in response.topic_errors  # (topic, code[, message]) by request version
            if err[1] not in (0, _TOPIC_ALREADY_EXISTS)
        ]
        if failed:
            raise ServiceError("could not create topics: " + "; ".join(failed))
        deadline = time.monotonic() + timeout
        while missing := set(names) - set(await admin.list_topics()):
            if time.monotonic() > deadline:
                raise ServiceError(f"topics not visible after {timeout:.0f}s: {sorted(missing)}")
            await asyncio.sleep(0.05)
    finally:
        await admin.close()


async def group_options_for(bootstrap: str) -> dict[str, int]:
    """Consumer-group timeouts that suit the broker: short ones for Tansu, else {} (defaults).

    Tansu is recognised by its cluster id: ours, or Tansu's own default.
    """
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=5000)
    await admin.start()
    try:
        cluster_id = (await admin.describe_cluster()).get("cluster_id")
    finally:
        await admin.close()
    return dict(EMBEDDED_GROUP_OPTIONS) if cluster_id in TANSU_CLUSTER_IDS else {}
