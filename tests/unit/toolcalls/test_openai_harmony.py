"""gpt-oss (Harmony) tool calls: our own cases, written from the Harmony format's documented
message shapes (vLLM's `openai` parser tests feed token ids, not text), read from the content
the `gpt_oss` reasoning format hands on, whole and streamed."""

from __future__ import annotations

import json

import pytest

from pipeline.formats import get_format
from pipeline.toolcalls import ToolCallStream, before_calls, get_parser

ANALYSIS = "<|channel|>analysis<|message|>The user wants the weather in SF.<|end|>"
CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"location": "San Francisco", "unit": "celsius"}<|call|>'
)
CASES = [
    # (generation after the prompt, calls [(name, arguments)], content)
    (ANALYSIS + CALL, [("get_weather", {"location": "San Francisco", "unit": "celsius"})], None),
    (  # the recipient in the role header
        ANALYSIS + "<|start|>assistant to=functions.lookup<|channel|>commentary json"
        '<|message|>{"q": "harmony"}<|call|>',
        [("lookup", {"q": "harmony"})],
        None,
    ),
    (  # two calls, one after the other
        ANALYSIS + CALL + "<|start|>assistant<|channel|>commentary to=functions.get_time "
        '<|constrain|>json<|message|>{"zone": "PST"}<|call|>',
        [
            ("get_weather", {"location": "San Francisco", "unit": "celsius"}),
            ("get_time", {"zone": "PST"}),
        ],
        None,
    ),  # fmt: skip
    (  # no call: the final answer
        ANALYSIS + "<|start|>assistant<|channel|>final<|message|>It is sunny.<|return|>",
        [],
        "It is sunny.",
    ),
    (  # commentary to no one is content, not a call
        ANALYSIS + "<|start|>assistant<|channel|>commentary<|message|>Checking.<|end|>",
        [],
        "Checking.",
    ),
]


@pytest.mark.parametrize("text, calls, content", CASES)
def test_calls_from_the_gpt_oss_content(text, calls, content):
    parts = get_format("gpt_oss").split(text)
    assert parts.reasoning == "The user wants the weather in SF."
    out = get_parser("openai").extract(parts.content)
    assert [(c.name, json.loads(c.arguments)) for c in out.calls] == calls
    if calls:
        assert out.content == content
    else:  # no call: the content is the format's, untouched
        assert out.content == parts.content == content


@pytest.mark.parametrize("size", [1, 4, 9])
@pytest.mark.parametrize("text, calls, content", CASES)
def test_streamed_equals_whole(text, calls, content, size):
    parser, body = get_parser("openai"), get_format("gpt_oss").split(text).content
    stream, found = ToolCallStream(parser), []
    for i in range(0, len(body), size):
        found += stream.feed(body[i : i + size])[1]
    found += stream.flush()[1]
    assert [d.call for d in found] == parser.extract(body).calls


def test_verification_stops_at_the_recipient_not_at_every_header():
    assert before_calls(ANALYSIS) == ANALYSIS  # thinking's own headers are not calls
    assert "get_weather" not in before_calls(ANALYSIS + CALL)
