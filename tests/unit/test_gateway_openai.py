"""The OpenAI request mapping (pure): thinking budgets, reasoning effort, streaming, verify."""

import pytest

from pipeline import schema
from pipeline.gateway.openai_api import ChatRequest, answer_text, reasoning_text, to_job
from pipeline.gateway.service import GatewayError

MSG = [{"role": "user", "content": "What is 2 + 3?"}]


def job(**kw) -> schema.Job:
    return to_job(ChatRequest(model="m", messages=MSG, **kw), "m")


def test_thinking_budgets_map_onto_the_job():
    assert job().params.max_thinking_tokens is None
    assert job(thinking_token_budget=300).params.max_thinking_tokens == 300
    assert job(reasoning_effort="low").params.max_thinking_tokens == 256
    assert job(reasoning_effort="high").params.max_thinking_tokens == 4096
    assert job(reasoning_effort="high", thinking_token_budget=100).params.max_thinking_tokens == 100
    with pytest.raises(GatewayError) as e:
        job(reasoning_effort="extreme")
    assert e.value.status == 400 and e.value.field == "reasoning_effort"


def test_streams_tokens_and_takes_verify():
    assert job(stream=True).params.stream == "tokens"
    assert job().params.stream == "steps"
    assert job(verify="off").params.verify == "off"
    with pytest.raises(GatewayError):
        job(verify="sometimes")


def test_content_and_reasoning_come_from_the_split():
    r = schema.Result(id="j", status="ok", text="x", reasoning="think", content="ans", ts_ms=1)
    assert (answer_text(r), reasoning_text(r)) == ("ans", "think")
    empty = schema.Result(id="j", status="ok", text="", reasoning="", content="", ts_ms=1)
    assert reasoning_text(empty) is None  # null, as vLLM sends no reasoning
    old = schema.Result(id="j", status="ok", text="1 + 1 = 2\nAnswer: 2", answer="2", ts_ms=1)
    assert answer_text(old) == "Answer: 2"  # a Result from before the split (cached)
