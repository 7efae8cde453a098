"""The R1-style reasoner's tool-use traces (tools/r1_tool_traces.py): every call is what the
hermes parser reads as the task's call, every answer states the tool's result, the calculator's
thinking states true arithmetic, and a training example's loss covers the completion only."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from pipeline.evals.problems import split_of
from pipeline.models.r1_template import R1_CHAT_TEMPLATE
from pipeline.toolcalls.registry import get_parser
from tests.model_factory import add_char_tokenizer, make_tiny_model
from tools.r1_tool_traces import TOOLS, tool_example

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = [tool_example(0, i) for i in range(300)]


def test_the_kinds_are_all_drawn_and_each_example_is_a_pure_function_of_its_index():
    assert {e.kind for e in EXAMPLES} == {"call", "answer", "plain"}
    assert tool_example(0, 17) == tool_example(0, 17) and tool_example(0, 17) != tool_example(1, 17)
    assert {e.task.tool for e in EXAMPLES if e.task} == set(TOOLS)


@pytest.mark.parametrize("kind", ["call", "answer", "plain"])
def test_what_the_completion_says(kind):
    hermes = get_parser("hermes")
    for e in (e for e in EXAMPLES if e.kind == kind):
        thinking, _, after = e.completion.partition("</think>")
        assert thinking.startswith("<think>\n") and after
        got = hermes.extract(after)
        offered = {t["function"]["name"] for t in e.tools}
        if kind == "call":
            assert [(c.name, json.loads(c.arguments)) for c in got.calls] == [
                (e.task.tool, e.task.arguments)
            ]
            assert e.task.tool in offered
        else:
            assert not got.calls and e.gold in after
        if kind == "plain":
            assert "calculate" not in offered  # no tool fits the problem
            assert split_of(e.messages[0]["content"]) == "train"


def test_the_calculators_thinking_states_true_arithmetic():
    calcs = [e for e in EXAMPLES if e.task and e.task.tool == "calculate"]
    assert calcs
    for e in calcs:
        expr = e.task.arguments["expression"]
        assert re.fullmatch(r"[-+*/() \d]+", expr), expr
        assert eval(expr) == e.task.result["result"]  # digits and operators only (checked above)
        assert split_of(e.task.question) == "train"


def test_an_answer_chat_renders_the_call_and_the_tool_result():
    e = next(e for e in EXAMPLES if e.kind == "answer")
    call = e.messages[1]["tool_calls"][0]
    assert e.messages[2] == {"role": "tool", "tool_call_id": call["id"],
                             "content": json.dumps(e.task.result)}  # fmt: skip


def test_a_training_example_learns_the_completion_only(tmp_path):
    spec = importlib.util.spec_from_file_location("train_r1", ROOT / "tools/train_r1_reasoner.py")
    trainer = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(trainer)
    tok_dir = add_char_tokenizer(make_tiny_model("llama", tmp_path / "m"), chat_template="")
    tok = AutoTokenizer.from_pretrained(str(tok_dir))
    e = next(e for e in EXAMPLES if e.kind == "answer")
    ids, labels = trainer.tool_ids(tok, e, 4096)
    prompt = tok.apply_chat_template(e.messages, tools=e.tools, chat_template=R1_CHAT_TEMPLATE,
                                     tokenize=False, add_generation_prompt=True)  # fmt: skip
    assert "<tool_response>" in prompt and '"name": "' + e.task.tool in prompt
    n = len(tok.encode(prompt, add_special_tokens=False))
    assert labels[:n] == [-100] * n and labels[n:] == ids[n:]
    assert tok.decode(ids[n:-1]) == e.completion and ids[-1] == tok.eos_token_id
