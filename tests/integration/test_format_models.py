"""Issue 37's acceptance: a random-weight model per added reasoning format through the whole
local stack (ingest, prefill, decode, the Celery verify worker, the gateway), spoken to with
the official `openai` client: the thinking and the answer split by the format, the streamed
deltas adding up to the whole response, a spent thinking budget closing the thinking the
format's way, reasoning tokens counted; and a Kafka job per format with verification on.

(The exact streaming invariant, every cut of a text, is the unit tests'; here the stream of a
whole generation, a forced answer's included.)

Each model (tests/model_factory.FORMAT_MODELS) has its family's marker tokens, special where
the family's are, and a chat template of its shape that opens the thinking."""

from __future__ import annotations

import uuid

import openai
import pytest
import pytest_asyncio

from pipeline import schema
from pipeline.formats import get_format
from pipeline.gateway.config import GatewayConfig
from pipeline.local import services
from pipeline.topics import STAGES, Topics
from tests.integration.conftest import TEST_PARTITIONS, _delete_topics
from tests.integration.pipeline_helpers import run_jobs, serving_gateway, stack_config
from tests.integration.test_gateway import free_port
from tests.model_factory import (
    FORMAT_MESSAGES,
    FORMAT_MODELS,
    FORMAT_QUESTION,
    THINKING_ON,
    format_prompt,
    make_format_model,
)

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
MESSAGES = list(FORMAT_MESSAGES)
PREFIX = get_format("qwen3").answer_prefix  # every marker format's: "The answer is \\boxed{"


@pytest.fixture(scope="module")
def model_root(tmp_path_factory):
    return tmp_path_factory.mktemp("format-models")


@pytest_asyncio.fixture(
    scope="module", loop_scope="module", params=sorted(FORMAT_MODELS), ids=lambda n: n
)
async def stack(request, kafka_bootstrap, redis_url, verify_worker, model_root):
    """The stack and the gateway serving one format's model, on fresh topics."""
    name = request.param
    path = make_format_model(name, model_root)
    topics = Topics(f"test.{uuid.uuid4().hex[:10]}.")
    counts = topics.partitions(dict.fromkeys(STAGES, TEST_PARTITIONS))
    await services.create_topics(kafka_bootstrap, topics.all(), counts)
    config = stack_config(kafka_bootstrap, redis_url, topics, model=str(path))
    async with serving_gateway(config, GatewayConfig(pipeline=config, port=free_port())) as (
        _,
        addr,
    ):
        yield name, config, f"http://{addr}/v1"
    await _delete_topics(kafka_bootstrap, topics.all())


def rendered_prompt(model_dir: str, name: str) -> str:
    """The prompt as the model's template renders it (where the thinking starts)."""
    from transformers import AutoTokenizer

    return format_prompt(AutoTokenizer.from_pretrained(model_dir), name)


async def ask(client, name: str, model: str, stream: bool, **body):
    """One greedy, seeded request (a repeat is answered from the answer cache, with the Result
    of the first generation): (reasoning, content, finish reason, usage, response)."""
    if name in THINKING_ON:
        body["chat_template_kwargs"] = THINKING_ON[name]
    kw = dict(model=model, messages=MESSAGES, temperature=0.0, max_tokens=200, seed=1)
    if not stream:
        done = await client.chat.completions.create(**kw, extra_body={"verify": "off", **body})
        choice = done.choices[0]
        reasoning = (choice.message.model_extra or {}).get("reasoning_content") or ""
        return reasoning, choice.message.content, choice.finish_reason, done.usage, done
    content = reasoning = ""
    finish = usage = None
    chunks = await client.chat.completions.create(
        **kw, stream=True, stream_options={"include_usage": True},
        extra_body={"verify": "off", **body},
    )  # fmt: skip
    async for chunk in chunks:
        usage = chunk.usage or usage  # the final usage chunk
        if chunk.choices:
            delta = chunk.choices[0].delta
            content += delta.content or ""
            reasoning += (delta.model_extra or {}).get("reasoning_content") or ""
            finish = chunk.choices[0].finish_reason or finish
    return reasoning, content, finish, usage, None


def assert_same(streamed: tuple, whole: tuple) -> None:
    """The streamed response adds up to the whole one, part by part (verification off: nothing
    is cut back, a spent budget closes the thinking where it stands)."""
    assert (streamed[0].strip(), streamed[1].strip()) == whole[:2], (streamed, whole)


async def test_a_spent_budget_closes_the_thinking_and_the_answer_follows(stack):
    name, config, base = stack
    fmt = get_format(name)
    client = openai.AsyncOpenAI(base_url=base, api_key="none", timeout=300)
    streamed = await ask(client, name, config.model, True, thinking_token_budget=16)
    whole = await ask(client, name, config.model, False, thinking_token_budget=16)
    reasoning, content, finish, usage, done = whole
    raw = await ask(
        client, name, config.model, False, thinking_token_budget=16, separate_reasoning=False
    )
    text, prompt = raw[1], rendered_prompt(config.model, name)
    # The response is the format's split of the generation as written.
    parts = fmt.split(text, prompt)
    assert (parts.reasoning, parts.content) == (reasoning, content)
    extra = done.choices[0].message.model_extra or {}
    assert extra.get("reasoning") == extra.get("reasoning_content")
    # Forcing closed the thinking the format's way, then wrote the answer prefix; neither
    # marker nor prefix is in the thinking.
    assert finish == streamed[2] == "length"
    closing = fmt.force_text("x", prompt).removesuffix(PREFIX)
    assert closing.strip() in text, (closing, text)
    kept = get_format(name.replace("_append_think", "")).split(text, prompt)
    assert PREFIX in kept.content and PREFIX not in kept.reasoning
    if name == "minimax_m2_append_think":  # the whole generation is the content
        assert content.startswith("<think>") and not reasoning
    assert_same(streamed, whole)
    # Reasoning tokens: in the response and in the stream's final usage chunk alike (the
    # thinking's tokens, its whitespace and end marker too).
    details = usage.completion_tokens_details
    assert streamed[3].completion_tokens_details == details
    assert bool(reasoning) <= details.reasoning_tokens <= usage.completion_tokens


async def test_unforced_the_streamed_deltas_add_up_to_the_whole_split(stack):
    name, config, base = stack
    fmt = get_format(name)
    client = openai.AsyncOpenAI(base_url=base, api_key="none", timeout=300)
    # No budget of the request's: a model whose end marker is one token (boosted) may close
    # its thinking itself and answer until max_tokens, nothing forced or cut back.
    streamed = await ask(client, name, config.model, True)
    whole = await ask(client, name, config.model, False)
    raw = await ask(client, name, config.model, False, separate_reasoning=False)
    parts = fmt.split(raw[1], rendered_prompt(config.model, name))
    assert (parts.reasoning, parts.content) == whole[:2]
    assert streamed[2] == whole[2] == "length"
    assert_same(streamed, whole)
    assert streamed[3].completion_tokens_details == whole[3].completion_tokens_details


async def test_a_job_with_verification_on_runs_in_the_format(stack):
    name, config, _ = stack
    job = schema.Job(
        id=f"fmt-{uuid.uuid4().hex[:8]}",
        messages=[schema.Message(role="user", content=FORMAT_QUESTION)],
        params=schema.JobParams(
            temperature=0.0, max_tokens=200, max_thinking_tokens=64, verify="async"
        ),
        chat_template_kwargs=THINKING_ON.get(name),
    )
    events, results = await run_jobs(config, [job], timeout_s=300)
    (result,) = results[job.id]
    assert result.status == "ok", result.error
    verdicts = [e for e in events[job.id] if e.kind == "verdict"]
    v = result.verification
    # Every kept step went through verification (a random model writes no arithmetic, so
    # nothing in it is checkable: the report says so, not "off").
    assert v is not None and v.status != "off" and v.steps == len(result.steps) > 0
    assert v.checks == len(verdicts)
    steps = [e for e in events[job.id] if e.kind == "step"]
    assert steps and all(get_format(name).strip_markers(e.text) == e.text for e in steps)
    parts = get_format(name).split(result.text, rendered_prompt(config.model, name))
    assert (parts.reasoning, parts.content) == (result.reasoning, result.content)
