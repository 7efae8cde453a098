"""A hostile tenant on the real stack (issue 24, item 6): tenant B, holding a valid key of its own,
never sees tenant A's jobs, events or cache entries, nor anything of A in the metrics that the
gateway and the workers serve."""

from __future__ import annotations

import json
import uuid

import httpx2 as httpx
import pytest
import websockets
from prometheus_client.parser import text_string_to_metric_families

from pipeline.gateway.config import GatewayConfig
from pipeline.stage.processes import free_port
from tests.integration.pipeline_helpers import serving_gateway, stack_config
from tests.integration.test_gateway import until_closed, wait_done

pytestmark = pytest.mark.slow
PROMPT = "Compute (6 + 7) * 2."  # greedy with verify off: reproducible, so its answer is cached
# A label naming who or which job would let any scraper read a tenant's traffic: none may exist.
IDENTIFYING_LABELS = {"tenant", "job_id", "id", "user", "app", "key"}


def job(claimed_tenant: str | None = None) -> dict:
    body = {"id": f"h-{uuid.uuid4().hex[:10]}", "prompt": PROMPT}
    body["params"] = {"temperature": 0.0, "verify": "off"}
    if claimed_tenant is not None:  # a claim the gateway must overwrite with the key's tenant
        body["tenant"] = claimed_tenant
    return body


async def run(http: httpx.AsyncClient, body: dict, headers: dict) -> dict:
    """Submit `body` and wait for its Result (as the submitter sees it)."""
    r = await http.post("/v1/jobs", json=body, headers=headers)
    assert r.status_code == 202, r.text
    return (await wait_done(http, body["id"], headers, timeout_s=120))["result"]


async def first_message_answer(addr: str, key: str, message: dict) -> tuple[int, list[dict]]:
    """Open the stream with `key`, send `message`: (close code, every message received)."""
    async with websockets.connect(f"ws://{addr}/v1/stream?api_key={key}") as ws:
        await ws.send(json.dumps(message))
        msgs = await until_closed(ws)
    return ws.close_code, msgs


def leaks(text: str, secrets: list[str]) -> list[str]:
    """What a scrape reveals: any of `secrets` anywhere, or a label that identifies anyone."""
    found = [s for s in secrets if s in text]
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found += [f"{sample.name}{{{k}}}" for k in sample.labels if k in IDENTIFYING_LABELS]
    return found


async def test_tenant_b_never_sees_tenant_a(kafka_bootstrap, redis_url, topics):
    suffix = uuid.uuid4().hex[:6]  # fresh tenants: no cache entry left by an earlier run
    tenant_a, tenant_b = f"tenantA-{suffix}", f"tenantB-{suffix}"
    key_a, key_b = f"sk-hostile-a-{suffix}", f"sk-hostile-b-{suffix}"
    A, B = {"Authorization": f"Bearer {key_a}"}, {"Authorization": f"Bearer {key_b}"}
    config = stack_config(kafka_bootstrap, redis_url, topics)
    keys = {key_a: tenant_a, key_b: tenant_b}
    gateway_config = GatewayConfig(pipeline=config, port=free_port(), api_keys=keys)
    async with (
        serving_gateway(config, gateway_config) as (app, addr),
        httpx.AsyncClient(base_url=f"http://{addr}", timeout=30) as http,
    ):
        a_job = job()
        a_result = await run(http, a_job, A)
        assert (a_result["status"], a_result["tenant"]) == ("ok", tenant_a)

        # Jobs: another tenant's id is not found (never 403: ids do not leak).
        r = await http.get(f"/v1/jobs/{a_job['id']}", headers=B)
        assert r.status_code == 404 and r.json()["error"]["code"] == "not_found", r.text
        assert tenant_a not in r.text

        # Events: subscribing is refused before any event; resubmitting the id to get its
        # stream is a conflict, also before any event.
        for message in ({"subscribe": a_job["id"]}, {"subscribe": a_job["id"], "from_seq": 2}):
            code, msgs = await first_message_answer(addr, key_b, message)
            assert code == 4404 and [m["error"]["code"] for m in msgs] == ["not_found"], msgs
        code, msgs = await first_message_answer(
            addr, key_b, {"submit": {**job(), "id": a_job["id"]}}
        )
        assert code == 4409 and [m["error"]["code"] for m in msgs] == ["id_conflict"], msgs

        # Cache: A's answer is cached for A, and B asking the same (even claiming to be A) gets
        # a run of its own, which is then cached for B alone.
        a_again = await run(http, job(), A)
        assert a_again["status"] == "cached" and a_again["answer"] == a_result["answer"]
        b_job = job(claimed_tenant=tenant_a)
        b_result = await run(http, b_job, B)
        assert (b_result["status"], b_result["tenant"]) == ("ok", tenant_b), b_result
        b_again = await run(http, job(), B)
        assert (b_again["status"], b_again["tenant"]) == ("cached", tenant_b)

        # Metrics: the gateway's /metrics (B's key or none) and each worker's carry no tenant,
        # job id or key, and no label that could hold one. In-process workers share one
        # registry with the gateway: the same series, served on each worker's own port.
        secrets = [tenant_a, tenant_b, a_job["id"], b_job["id"], key_a, key_b]
        scrapes = [(await http.get("/metrics", headers=B)).text]
        for worker in app.state.workers:
            assert worker.metrics_port > 0, worker
            scrapes.append((await http.get(f"http://127.0.0.1:{worker.metrics_port}/metrics")).text)
        for text in scrapes:
            assert "stepwise_jobs_total" in text  # a real scrape, with the jobs above counted
            assert leaks(text, secrets) == []
