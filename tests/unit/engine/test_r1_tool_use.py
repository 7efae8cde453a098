"""The bundled R1-style reasoner uses tools (issue 38, item 4): offered tools and a question one
of them answers, it thinks, closes its thinking and calls the right tool with the question's
values; given the tool's result, it answers from it. Held-out chats (seeds the training never
drew), greedy; bench/tool_calls.py measures the rates on more of them, before and after."""

import json

import pytest

from pipeline.engine import Engine, EngineConfig, SamplingParams
from pipeline.models.paths import is_current, is_prepared, r1_dir
from pipeline.toolcalls.registry import get_parser
from tools.r1_tool_traces import prompt_ids, tool_example

PATH = r1_dir()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not (is_prepared(PATH) and is_current(PATH)),
        reason="r1-reasoner not prepared: run `stepwise models prepare r1-reasoner`",
    ),
]
SEED = 2000  # held out: the training drew seed 0's examples


@pytest.fixture(scope="module")
def engine():
    return Engine(EngineConfig(model=str(PATH), dtype="float32", kv_cache_memory_gb=0.25))


def generate(engine: Engine, examples) -> list[str]:
    prompts = [prompt_ids(engine.tokenizer.hf, e) for e in examples]
    outs = engine.generate(prompts, SamplingParams(temperature=0.0, max_tokens=160))
    return [o.text for o in outs]


def test_it_calls_the_tool_the_question_needs_with_its_values(engine):
    examples = [tool_example(SEED, i, "call") for i in range(8)]
    closed = called = right = 0
    for e, text in zip(examples, generate(engine, examples), strict=True):
        thinking, end, after = text.partition("</think>")
        calls = get_parser("hermes").extract(after).calls
        closed += bool(end)  # it closes its thinking before the call
        called += bool(end and calls)
        right += [(c.name, json.loads(c.arguments)) for c in calls] == [
            (e.task.tool, e.task.arguments)
        ]
    # Here (2026-12-04): 8 closed, 7 called, 6 exactly right. bench/tool_calls.py on 40 other
    # held-out chats: 90% call, 45% exactly right (the misses: a leading space inside a
    # string, another tool, an argument left out). The bounds leave room for another CPU's
    # float rounding to flip a greedy choice or two.
    assert closed == 8 and called >= 6 and right >= 4, (closed, called, right)


def test_given_the_result_it_answers_from_it(engine):
    examples = [tool_example(SEED, i, "answer") for i in range(8)]
    right = 0
    for e, text in zip(examples, generate(engine, examples), strict=True):
        after = text.partition("</think>")[2]
        assert not get_parser("hermes").extract(after).calls, text
        right += e.gold in after
    assert right >= 6, f"{right} of 8 answers state the tool's result"  # here: 7
