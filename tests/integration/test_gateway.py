"""The gateway against the real local stack: HTTP jobs API, WebSocket stream with resume, API keys
(config and Redis) and tenant isolation, rate limits, the slow-client policy, the official
`openai` client, `stepwise stream`, and the live page driven by headless Chromium."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
import sys
import uuid
from pathlib import Path

import httpx2 as httpx
import openai
import pytest
import pytest_asyncio
import redis.asyncio
import websockets

from pipeline.client import current_chain
from pipeline.gateway import stream
from pipeline.gateway.auth import redis_keys_name
from pipeline.gateway.config import GatewayConfig
from pipeline.gateway.limits import RateLimit
from pipeline.local import services
from pipeline.schema import Event
from pipeline.topics import STAGES, Topics
from tests.integration.browser import Browser
from tests.integration.conftest import TEST_PARTITIONS, _delete_topics
from tests.integration.pipeline_helpers import serving_gateway, stack_config

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
KEYS = {"key-a": "tenantA", "key-b": "tenantB"}
A = {"Authorization": "Bearer key-a"}
B = {"Authorization": "Bearer key-b"}
PARAMS = {"temperature": 0.7, "max_tokens": 120}
RATE_LIMITED = "tenantR"  # only the rate-limit test submits as this tenant (a Redis-held key)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def gateway(kafka_bootstrap, redis_url, verify_worker):
    """The stack on fresh topics, and the gateway app served by uvicorn on a free port."""
    topics = Topics(f"test.{uuid.uuid4().hex[:10]}.")
    counts = topics.partitions(dict.fromkeys(STAGES, TEST_PARTITIONS))
    await services.create_topics(kafka_bootstrap, topics.all(), counts)
    config = stack_config(kafka_bootstrap, redis_url, topics)
    port = free_port()
    gateway_config = GatewayConfig(
        pipeline=config, port=port, api_keys=KEYS, api_keys_redis=True, key_cache_ttl_s=0.2,
        tenant_rates={RATE_LIMITED: RateLimit(rate=0.05, burst=2)},
    )  # fmt: skip
    async with serving_gateway(config, gateway_config) as (app, addr):
        # One job end to end first: every stage is past start-up (and a failing test's
        # teardown never stops a worker that is still joining its group).
        async with httpx.AsyncClient(base_url=f"http://{addr}", timeout=30) as http:
            r = await http.post("/v1/jobs", json=job(0), headers=A)
            await wait_done(http, r.json()["id"], A, timeout_s=120)
        yield app.state.gateway, addr
    await _delete_topics(kafka_bootstrap, topics.all())


def job(i: int, **params) -> dict:
    return {
        "id": f"gw-{uuid.uuid4().hex[:8]}-{i}",
        "prompt": f"What is {3 + i} + {4 + 2 * i}?",
        "params": {**PARAMS, "seed": i, **params},
    }


async def read_all(ws) -> tuple[list[dict], dict]:
    """Every message until the server closes: (events, result)."""
    msgs = [json.loads(m) async for m in ws]
    assert msgs and msgs[-1]["kind"] == "result", msgs[-1:]
    return msgs[:-1], msgs[-1]


async def until_closed(ws) -> list[dict]:
    """Every message until the server closes, whatever the close code."""
    msgs = []
    with contextlib.suppress(websockets.ConnectionClosed):
        async for m in ws:
            msgs.append(json.loads(m))
    return msgs


def assert_gap_free(events: list[dict], result: dict) -> None:
    seqs = [e["seq"] for e in events]
    assert seqs == list(range(len(seqs))), seqs
    assert events[0]["kind"] == "accepted" and events[-1]["kind"] == "final"
    chain = current_chain([Event(**e) for e in events])
    assert chain == [s["text"] for s in result["steps"]]


async def test_ws_submit_streams_every_event_then_the_result(gateway):
    _, addr = gateway
    async with websockets.connect(f"ws://{addr}/v1/stream?api_key=key-a") as ws:
        await ws.send(json.dumps({"submit": job(1)}))
        events, result = await read_all(ws)
    assert ws.close_code == 1000
    assert result["status"] == "ok" and result["tenant"] == "tenantA"
    assert_gap_free(events, result)


async def test_ws_resume_from_seq_has_no_gap_and_no_duplicate(gateway):
    _, addr = gateway
    j = job(2)
    async with websockets.connect(f"ws://{addr}/v1/stream", additional_headers=A) as ws:
        await ws.send(json.dumps({"submit": j}))
        first = [json.loads(await ws.recv()) for _ in range(3)]
    # dropped; the job runs on. Resume from the next seq.
    url = f"ws://{addr}/v1/stream?api_key=key-a"
    async with websockets.connect(url) as ws:
        await ws.send(json.dumps({"subscribe": j["id"], "from_seq": first[-1]["seq"] + 1}))
        rest, result = await read_all(ws)
    assert result["status"] == "ok"
    assert_gap_free(first + rest, result)


async def test_http_jobs_api_and_tenant_isolation(gateway):
    _, addr = gateway
    base = f"http://{addr}"
    async with httpx.AsyncClient(base_url=base, timeout=30) as http:
        assert (await http.get("/healthz")).status_code == 200
        assert "process_cpu_seconds_total" in (await http.get("/metrics")).text
        assert "<textarea" in (await http.get("/")).text  # the live page
        j = job(3)
        assert (await http.post("/v1/jobs", json=j)).status_code == 401
        assert (
            await http.post("/v1/jobs", json=j, headers={"Authorization": "Bearer x"})
        ).status_code == 401
        r = await http.post("/v1/jobs", json=j, headers=A)
        assert r.status_code == 202 and r.json()["id"] == j["id"]
        bad = await http.post("/v1/jobs", json={**job(4), "params": {"temperature": 9}}, headers=A)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "invalid_field"
        assert bad.json()["error"]["field"] == "params.temperature"
        # Another tenant sees no such job; the same id cannot be taken over.
        assert (await http.get(f"/v1/jobs/{j['id']}", headers=B)).status_code == 404
        assert (await http.post("/v1/jobs", json=j, headers=B)).status_code == 409
        async with websockets.connect(f"ws://{addr}/v1/stream", additional_headers=B) as ws:
            await ws.send(json.dumps({"subscribe": j["id"]}))
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    await ws.recv()
        assert ws.close_code == 4404
        async with websockets.connect(f"ws://{addr}/v1/stream?api_key=nope") as ws:
            msgs = await until_closed(ws)  # the error, then the close
        assert ws.close_code == 4401 and msgs[0]["error"]["code"] == "unauthorized"
        body = await wait_done(http, j["id"], A)
        assert body["result"]["status"] == "ok" and body["result"]["tenant"] == "tenantA"
        assert body["num_events"] > 2
        # An id-less Job gets one.
        r = await http.post("/v1/jobs", json={"prompt": "What is 2 + 2?"}, headers=B)
        assert r.status_code == 202 and r.json()["id"].startswith("gw-")


async def wait_done(http, job_id: str, headers: dict, timeout_s: float = 60) -> dict:
    for _ in range(int(timeout_s / 0.2)):
        r = await http.get(f"/v1/jobs/{job_id}", headers=headers)
        assert r.status_code == 200, r.text
        if r.json()["status"] == "done":
            return r.json()
        await asyncio.sleep(0.2)
    raise TimeoutError(job_id)


async def test_slow_client_is_closed_and_the_job_completes(gateway, monkeypatch):
    gw, addr = gateway
    fast_send = stream.send

    async def slow_send(ws, data):  # a client on a slow link: each frame takes a while
        await asyncio.sleep(0.5)
        await fast_send(ws, data)

    monkeypatch.setattr(stream, "send", slow_send)
    monkeypatch.setattr(gw.config, "ws_max_queue", 4)
    j = job(5, stream="tokens")
    async with websockets.connect(f"ws://{addr}/v1/stream", additional_headers=A) as ws:
        await ws.send(json.dumps({"submit": j}))
        with pytest.raises(websockets.ConnectionClosed):
            while True:
                await ws.recv()
    assert ws.close_code == stream.SLOW_CONSUMER and "slow consumer" in ws.close_reason
    async with httpx.AsyncClient(base_url=f"http://{addr}", timeout=30) as http:
        body = await wait_done(http, j["id"], A)
    assert body["result"]["status"] == "ok"


async def test_openai_client_chat_completions(gateway):
    _, addr = gateway
    client = openai.AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="key-a")
    models = await client.models.list()
    assert [m.id for m in models.data] == ["tiny-reasoner"]
    messages = [{"role": "user", "content": "What is 12 + 7?"}]
    done = await client.chat.completions.create(
        model="tiny-reasoner", messages=messages, max_completion_tokens=120, seed=1
    )
    msg = done.choices[0].message
    assert msg.content.startswith("Answer:")
    assert msg.reasoning_content.strip()
    assert done.usage.completion_tokens > 0 and done.choices[0].finish_reason in ("stop", "length")
    chunks = await client.chat.completions.create(
        model="tiny-reasoner",
        messages=messages,
        max_tokens=120,
        seed=2,
        stream=True,
        stream_options={"include_usage": True},
    )
    reasoning, content, usage = "", "", None
    async for chunk in chunks:
        usage = chunk.usage or usage
        for choice in chunk.choices:
            reasoning += getattr(choice.delta, "reasoning_content", None) or ""
            content += choice.delta.content or ""
    assert reasoning.strip() and content.startswith("Answer:")
    assert usage is not None and usage.completion_tokens > 0
    with pytest.raises(openai.AuthenticationError):
        await openai.AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="bad").models.list()
    with pytest.raises(openai.NotFoundError):
        await client.chat.completions.create(model="gpt-4", messages=messages)


async def test_redis_held_key_rate_limit_and_revocation(gateway, redis_url):
    gw, addr = gateway
    keys = redis.asyncio.Redis.from_url(redis_url)
    name = redis_keys_name(gw.topics.prefix)
    await keys.hset(name, "key-r", RATE_LIMITED)
    R = {"Authorization": "Bearer key-r"}
    try:
        async with httpx.AsyncClient(base_url=f"http://{addr}", timeout=30) as http:
            first, second = job(6, max_tokens=16), job(7, max_tokens=16)
            assert (await http.post("/v1/jobs", json=first, headers=R)).status_code == 202
            assert (await http.get(f"/v1/jobs/{first['id']}", headers=A)).status_code == 404
            assert (await http.post("/v1/jobs", json=second, headers=R)).status_code == 202
            # burst 2 spent, 0.05 jobs/s: the third is refused with an OpenAI-style 429
            r = await http.post("/v1/jobs", json=job(8), headers=R)
            assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 20
            error = r.json()["error"]
            assert (error["code"], error["type"]) == ("rate_limited", "rate_limit_error")
            limited = openai.AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="key-r")
            with pytest.raises(openai.RateLimitError):
                await limited.with_options(max_retries=0).chat.completions.create(
                    model="tiny-reasoner", messages=[{"role": "user", "content": "1 + 1?"}]
                )
            async with websockets.connect(f"ws://{addr}/v1/stream", additional_headers=R) as ws:
                await ws.send(json.dumps({"submit": job(9)}))
                msgs = await until_closed(ws)
            assert ws.close_code == 4429 and msgs[0]["error"]["code"] == "rate_limited"
            for j in (first, second):
                assert (await wait_done(http, j["id"], R))["result"]["tenant"] == RATE_LIMITED
            # revoked in Redis: refused once the cached entry expires
            await keys.hdel(name, "key-r")
            await asyncio.sleep(0.3)
            assert (await http.get(f"/v1/jobs/{first['id']}", headers=R)).status_code == 401
    finally:
        await keys.delete(name)
        await keys.aclose()


async def test_stepwise_stream_cli_renders_the_job(gateway):
    _, addr = gateway
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "pipeline.cli", "stream", "What is 5 + 9?",
        "--url", f"http://{addr}", "--max-tokens", "120", "--seed", "4", "--temperature", "0.7",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, "STEPWISE_API_KEY": "key-a", "COLUMNS": "120", "NO_COLOR": "1"},
    )  # fmt: skip
    out = (await asyncio.wait_for(proc.communicate(), 180))[0].decode()
    assert proc.returncode == 0, out
    assert "What is 5 + 9?" in out and "  1. " in out, out
    assert "Answer: " in out and "stop_reason " in out and "thinking tokens" in out, out


async def test_browser_drives_the_live_page(gateway, tmp_path):
    """Debian's chromium, headless: type a problem and the key, press Solve, wait for the
    answer and the Result's budget line, then save a screenshot."""
    _, addr = gateway
    async with Browser() as page:
        await page.goto(f"http://{addr}/")
        await page.eval(
            """document.getElementById("problem").value = "What is 8 + 6?";
               document.getElementById("key").value = "key-a";
               document.getElementById("go").click(); true"""
        )
        status = await page.wait_for(
            """(() => { const s = document.getElementById("status").textContent;
                        return document.getElementById("answer").textContent && s.includes(")")
                               && s; })()""",
            timeout_s=120,
        )
        answer = await page.eval('document.getElementById("answer").textContent')
        steps = await page.eval(
            """[...document.querySelectorAll("#steps li")].map(li => [li.className,
               li.textContent])"""
        )
        marks = await page.eval(
            """[...document.querySelectorAll("#steps li mark")].map(m => [m.className,
               m.textContent])"""
        )
        coverage = await page.eval('document.getElementById("coverage").textContent')
        shot = await page.screenshot(tmp_path / "live_page.png")
        assert not page.errors, page.errors
    artifacts = os.environ.get("STEPWISE_TEST_ARTIFACTS")
    if artifacts:  # keep the screenshot where a person (or CI) can look at it
        Path(artifacts).mkdir(parents=True, exist_ok=True)
        Path(artifacts, "live_page.png").write_bytes(shot.read_bytes())
    assert status.startswith("ok (") and "thinking tokens" in status, status
    assert answer.startswith("Answer: "), answer
    assert steps and all(cls != "pending" or text for cls, text in steps), steps
    verdicts = {"entailed", "consistent", "no_claim", "contradicted", "unknown", "unverified"}
    assert {cls for cls, _ in steps} <= verdicts | {"gone", "pending"}, steps
    # The verifier's claims are marked inside the steps' text, and the page says what it covered.
    assert marks and all(cls in verdicts and text for cls, text in marks), marks
    assert "claims entailed" in coverage or "nothing checkable" in coverage, coverage
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 5000


# -- tools and structured output through the real stack (issue 38) ------------------------------

WEATHER = {
    "type": "object",
    "properties": {
        "city": {"enum": ["Paris", "Oslo", "Lima"]},
        "days": {"type": "integer", "minimum": 1, "maximum": 9},
    },
    "required": ["city", "days"],
    "additionalProperties": False,
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "description": "Weather forecast",
                                      "parameters": WEATHER}},
    {"type": "function", "function": {"name": "get_time", "parameters": {
        "type": "object", "properties": {"zone": {"enum": ["UTC", "CET"]}}, "required": ["zone"],
        "additionalProperties": False}}},
]  # fmt: skip
ASK = [{"role": "user", "content": "What is the weather in Paris for 3 days?"}]


async def test_openai_client_tool_calls_and_the_tool_result_turn(gateway):
    """The openai client's documented tool flow: the call (forced by tool_choice, so even a
    model that never calls on its own does), then the tool's result rendered as a turn."""
    _, addr = gateway
    client = openai.AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="key-a")
    done = await client.chat.completions.create(
        model="tiny-reasoner", messages=ASK, tools=TOOLS, tool_choice="required", seed=3,
        max_completion_tokens=200, parallel_tool_calls=False,  # a toy model never stops listing
    )  # fmt: skip
    choice = done.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls
    assert calls and {c.function.name for c in calls} <= {"get_weather", "get_time"}
    for c in calls:
        assert c.id.startswith("chatcmpl-tool-") and c.type == "function"
        assert isinstance(json.loads(c.function.arguments), dict)
    follow_up = [
        *ASK,
        {"role": "assistant", "content": None,
         "tool_calls": [c.model_dump() for c in calls]},
        *({"role": "tool", "tool_call_id": c.id, "content": '{"temp_c": 21}'} for c in calls),
    ]  # fmt: skip
    answer = await client.chat.completions.create(
        model="tiny-reasoner", messages=follow_up, tools=TOOLS, seed=4, max_completion_tokens=120
    )
    assert answer.choices[0].finish_reason in ("stop", "length", "tool_calls")


async def test_openai_client_streams_a_named_tool_call(gateway):
    _, addr = gateway
    client = openai.AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="key-a")
    named = {"type": "function", "function": {"name": "get_weather"}}
    chunks = await client.chat.completions.create(
        model="tiny-reasoner", messages=ASK, tools=TOOLS, tool_choice=named, seed=5,
        max_completion_tokens=200, stream=True,
    )  # fmt: skip
    calls: dict[int, dict] = {}
    finish = None
    async for chunk in chunks:
        for choice in chunk.choices:
            finish = choice.finish_reason or finish
            for d in choice.delta.tool_calls or ():
                if d.index not in calls:  # the first delta of a call: id and name
                    assert d.id and d.function.name
                    calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
                calls[d.index]["arguments"] += d.function.arguments or ""
    assert finish == "tool_calls"
    assert [c["name"] for c in calls.values()] == ["get_weather"]  # one call: the named one
    import jsonschema

    jsonschema.validate(json.loads(calls[0]["arguments"]), WEATHER)


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_client_json_schema_answer_validates(gateway, stream):
    import jsonschema

    _, addr = gateway
    client = openai.AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="key-a")
    fmt = {"type": "json_schema", "json_schema": {"name": "weather", "schema": WEATHER,
                                                  "strict": True}}  # fmt: skip
    kw = dict(model="tiny-reasoner", messages=ASK, response_format=fmt, seed=6,
              max_completion_tokens=200)  # fmt: skip
    if not stream:
        done = await client.chat.completions.create(**kw)
        content = done.choices[0].message.content
    else:
        content = ""
        async for chunk in await client.chat.completions.create(**kw, stream=True):
            for choice in chunk.choices:
                content += choice.delta.content or ""
    jsonschema.validate(json.loads(content), WEATHER)


@pytest.mark.parametrize(
    "extra, field",
    [
        ({"response_format": {"type": "nonsense"}}, "response_format.type"),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {
                        "name": "x",
                        "schema": {"type": "object", "properties": {"a": {"type": "zzz"}}},
                    },
                }
            },
            "response_format",
        ),  # fmt: skip
        ({"structured_outputs": {"regex": "(unclosed"}}, "structured_outputs"),
        ({"logit_bias": {"abc": 1000}}, "logit_bias"),
        ({"n": 2}, "n"),
        (
            {"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "nope"}}},
            "tool_choice",
        ),
        ({"tool_choice": "required"}, "tool_choice"),
    ],
)
async def test_fields_that_cannot_be_honoured_are_a_400_naming_them(gateway, extra, field):
    _, addr = gateway
    client = openai.AsyncOpenAI(base_url=f"http://{addr}/v1", api_key="key-a")
    with pytest.raises(openai.BadRequestError) as err:
        await client.chat.completions.create(
            model="tiny-reasoner", messages=ASK, max_completion_tokens=50, extra_body=extra
        )
    assert err.value.body["param"] == field or err.value.body.get("field") == field, err.value.body
