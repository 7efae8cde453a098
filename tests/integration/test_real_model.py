"""SmolLM2-135M-Instruct (a real chat model with no think markers: the `plain` format) through
the whole local stack: the official `openai` client, stream and non-stream, and the job's
events and Result with verification on."""

from __future__ import annotations

import uuid

import openai
import pytest
import pytest_asyncio

from pipeline import schema
from pipeline.gateway.config import GatewayConfig
from pipeline.local import services
from pipeline.models.resolve import resolve_model
from pipeline.topics import STAGES, Topics
from tests.integration.conftest import TEST_PARTITIONS, _delete_topics
from tests.integration.pipeline_helpers import run_jobs, serving_gateway, stack_config
from tests.integration.test_gateway import free_port

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
QUESTION = (
    "Mia has 12 apples and buys 3 bags with 4 apples each. How many apples does she have now?"
    "\nSolve it step by step. End with: The answer is <number>."
)


@pytest.fixture(scope="module")
def smollm2() -> str:
    return str(resolve_model("smollm2", prepare=False))  # setup.sh prepares it


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def real_stack(kafka_bootstrap, redis_url, verify_worker, smollm2):
    topics = Topics(f"test.{uuid.uuid4().hex[:10]}.")
    counts = topics.partitions(dict.fromkeys(STAGES, TEST_PARTITIONS))
    await services.create_topics(kafka_bootstrap, topics.all(), counts)
    config = stack_config(kafka_bootstrap, redis_url, topics, model="smollm2")
    async with serving_gateway(config, GatewayConfig(pipeline=config, port=free_port())) as (
        _,
        addr,
    ):
        yield config, f"http://{addr}/v1"
    await _delete_topics(kafka_bootstrap, topics.all())


async def test_openai_client_gets_thinking_and_content_split_by_the_format(real_stack):
    _, base = real_stack
    client = openai.AsyncOpenAI(base_url=base, api_key="none", timeout=300)
    messages = [{"role": "user", "content": QUESTION}]
    # Verification off: SmolLM2 slips often, and backtracks would cut its thinking (see below).
    kw = dict(
        model="smollm2", messages=messages, temperature=0.0, max_tokens=300, seed=1,
        extra_body={"verify": "off"},
    )  # fmt: skip
    # Streamed first: the deltas, each tagged by the format's streaming splitter.
    content, reasoning = "", ""
    async for chunk in await client.chat.completions.create(**kw, stream=True):
        if chunk.choices:
            delta = chunk.choices[0].delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
    # The same greedy job again: the answer cache returns that generation's Result, whose
    # split is the whole-text one. Streamed and whole must agree.
    done = await client.chat.completions.create(**kw)
    msg = done.choices[0].message
    extra = msg.model_extra or {}
    assert msg.content and msg.content.strip(), done
    assert extra.get("reasoning_content") and extra.get("reasoning") == extra["reasoning_content"]
    assert msg.content not in extra["reasoning_content"]  # the answer is not in the thinking
    assert content.strip() == msg.content.strip()
    assert reasoning.strip() == extra["reasoning_content"].strip()


async def test_results_events_and_coverage_agree(real_stack):
    config, _ = real_stack
    jobs = [
        schema.Job(
            id=f"real-{uuid.uuid4().hex[:8]}-{i}",
            messages=[schema.Message(role="user", content=q)],
            params=schema.JobParams(temperature=0.7, seed=i, max_tokens=300, verify="async"),
        )
        for i, q in enumerate([QUESTION, "What is 12 * 7? End with: The answer is <number>."])
    ]
    events, results = await run_jobs(config, jobs, timeout_s=600)
    for job in jobs:
        (result,) = results[job.id]
        assert result.status == "ok", result.error
        # The answer is the format's, and the content states it.
        fmt_answer = result.answer
        assert result.content is not None and result.reasoning is not None
        if fmt_answer is not None:
            assert fmt_answer in result.content
        assert result.steps and all(s.text.strip() for s in result.steps)  # no empty steps
        v = result.verification
        assert v is not None and v.status != "off"
        verdicts = [e for e in events[job.id] if e.kind == "verdict"]
        assert v.checks == len(verdicts)
        assert v.claims == sum(len(e.claims) for e in verdicts)
        assert v.entailed == sum(c.verdict == "entailed" for e in verdicts for c in e.claims)
        assert v.contradicted == sum(
            c.verdict == "contradicted" for e in verdicts for c in e.claims
        )
        (final,) = [e for e in events[job.id] if e.kind == "final"]
        assert final.verification == v
        # The question is the verifier's problem: "12 * 7" makes a bare answer a claim.
        for e in verdicts:
            for c in e.claims:
                assert 0 <= c.span[0] <= c.span[1]
