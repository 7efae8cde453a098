"""The gateway's pure parts: the hub (order, dedupe, resume, overflow, retention), API keys and
the OpenAI request mapping."""

from __future__ import annotations

import pytest

from pipeline import schema
from pipeline.gateway.auth import ApiKeys, Unauthorized
from pipeline.gateway.config import parse_api_keys
from pipeline.gateway.hub import EventsUnavailable, Hub, SlowConsumer
from pipeline.gateway.openai_api import ChatRequest, answer_text, to_job
from pipeline.gateway.service import GatewayError, parse_job


def ev(seq: int, kind: str = "step", job_id: str = "j1") -> schema.Event:
    return schema.Event(id=job_id, seq=seq, kind=kind, step=seq, text=f"s{seq}", ts_ms=0)


def res(job_id: str = "j1", status: str = "ok") -> schema.Result:
    return schema.Result(id=job_id, status=status, tenant="t", ts_ms=0)


async def collect(sub, grace_s: float = 0.05) -> list:
    return [item async for item in sub.items(grace_s)]


async def test_resume_replays_from_seq_without_duplicates():
    hub = Hub()
    for seq in (0, 1, 1, 2):  # 1 is redelivered
        hub.add_event(ev(seq))
    sub = hub.subscribe("j1", from_seq=1)
    hub.add_event(ev(3, "final"))
    hub.add_result(res())
    items = await collect(sub)
    assert [i.seq for i in items[:-1]] == [1, 2, 3] and items[-1].status == "ok"


async def test_ok_result_waits_for_final_event_within_grace():
    hub = Hub()
    sub = hub.subscribe("j1")
    hub.add_event(ev(0, "accepted"))
    hub.add_result(res())  # overtook the final event
    hub.add_event(ev(1, "final"))
    items = await collect(sub, grace_s=5)
    assert [type(i).__name__ for i in items] == ["Event", "Event", "Result"]
    cached = hub.subscribe("j3")  # an answer-cache hit: accepted + final, and its Result
    hub.add_result(res("j3", status="cached"))
    hub.add_event(ev(0, "accepted", job_id="j3"))
    hub.add_event(ev(1, "final", job_id="j3"))
    assert [type(i).__name__ for i in await collect(cached, grace_s=5)] == [
        "Event", "Event", "Result"
    ]  # fmt: skip
    lone = hub.subscribe("j2")
    hub.add_result(res("j2"))  # no final event ever: the grace ends it
    assert len(await collect(lone)) == 1


async def test_overflow_drops_only_the_subscriber():
    hub = Hub()
    for seq in range(10):
        hub.add_event(ev(seq))
    sub = hub.subscribe("j1", max_queue=3)  # replay does not count as backlog
    for seq in range(10, 13):
        hub.add_event(ev(seq))
    assert not sub.overflowed
    hub.add_event(ev(13))
    assert sub.overflowed and sub.dropped.is_set()
    with pytest.raises(SlowConsumer):
        await collect(sub)
    assert hub.get("j1").next_seq == 14


def test_retention_is_bounded():
    hub = Hub(max_jobs=2, max_events_per_job=3)
    for seq in range(5):
        hub.add_event(ev(seq))
    assert hub.get("j1").first_seq == 2
    with pytest.raises(EventsUnavailable):
        hub.subscribe("j1", from_seq=1)
    hub.add_event(ev(0, job_id="j2"))
    hub.add_event(ev(0, job_id="j3"))
    assert hub.get("j1") is None and set(hub.logs) == {"j2", "j3"}


def test_api_keys():
    keys = ApiKeys(parse_api_keys("k1:tA, k2:tB"))
    assert keys.tenant_for("k2") == "tB"
    with pytest.raises(Unauthorized):
        keys.tenant_for("nope")
    assert not keys.may_see("tA", "tB") and keys.may_see("tA", "tA")
    assert ApiKeys({}).tenant_for(None) == "default"
    with pytest.raises(ValueError):
        parse_api_keys("no-tenant")


def test_parse_job_generates_an_id_and_maps_schema_errors():
    assert parse_job(b'{"prompt": "hi"}').id.startswith("gw-")
    with pytest.raises(GatewayError) as err:
        parse_job(b'{"id": "a", "prompt": "hi", "params": {"top_p": 0}}')
    assert err.value.status == 400 and err.value.field == "params.top_p"


def test_chat_request_maps_onto_a_job():
    req = ChatRequest(
        model="m",
        messages=[
            {"role": "developer", "content": "Be brief."},
            {"role": "user", "content": "2+2?"},
        ],
        max_completion_tokens=64,
        temperature=0.5,
        seed=3,
    )
    job = to_job(req, "m")
    assert [m.role for m in job.messages] == ["system", "user"]
    assert (job.params.max_tokens, job.params.temperature, job.params.seed) == (64, 0.5, 3)
    with pytest.raises(GatewayError):
        to_job(req.model_copy(update={"model": "other"}), "m")
    result = schema.Result(id="a", status="ok", text="1 + 1 = 2\nAnswer: 2", answer="2", ts_ms=0)
    assert answer_text(result) == "Answer: 2"


class _FakeProducer:
    def __init__(self):
        self.sent: list[tuple[str, str]] = []

    async def send(self, topic: str, value: bytes, key: str | None = None, headers=None) -> None:
        self.sent.append((topic, key))


async def test_submit_forces_the_tenant_and_limits_jobs_in_flight():
    from pipeline.config import PipelineConfig
    from pipeline.gateway.config import GatewayConfig
    from pipeline.gateway.service import Gateway

    config = GatewayConfig(pipeline=PipelineConfig(kafka="x"), tenant_max_inflight=1)
    gw = Gateway(config)
    gw.producer = _FakeProducer()
    job = parse_job(b'{"id": "a", "tenant": "evil", "prompt": "hi"}')
    assert (await gw.submit(job, "tA")).tenant == "tA"
    with pytest.raises(GatewayError) as err:  # a second job while the first has no Result
        await gw.submit(parse_job(b'{"prompt": "hi"}'), "tA")
    assert err.value.status == 429
    with pytest.raises(GatewayError) as err:  # another tenant cannot take the id
        await gw.submit(job, "tB")
    assert err.value.status == 409
    await gw.submit(parse_job(b'{"prompt": "hi"}'), "tB")  # other tenants are not limited
    gw.hub.add_result(res("a"))
    await gw.submit(parse_job(b'{"prompt": "again"}'), "tA")
    assert len(gw.producer.sent) == 3
