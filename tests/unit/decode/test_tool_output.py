"""A job's tool calls read from its content (pure): by the parser, whole and streamed alike,
and from a forced JSON list; ids the same on every replay."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeline.decode.tool_output import ToolOutput, call_id, forced_calls, parser_name
from pipeline.toolcalls import get_parser

CONTENT = (
    'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n'
    '</tool_call><tool_call>\n{"name": "get_time", "arguments": {"zone": "CET"}}\n</tool_call>'
)


def test_parsed_whole_and_streamed_alike():
    whole = ToolOutput("job-1", "parse", get_parser("hermes")).whole(CONTENT)
    streamed, text = ToolOutput("job-1", "parse", get_parser("hermes")), ""
    calls = []
    for i in range(0, len(CONTENT), 5):
        piece, done = streamed.feed(CONTENT[i : i + 5])
        text, calls = text + piece, calls + done
    piece, done = streamed.flush()
    text, calls = text + piece, calls + done
    finished = [(i, c) for kind, i, c in calls if kind == "tool_call"]
    assert whole[0] == text == "Let me check."
    assert [c for _, c in finished] == whole[1] and [i for i, _ in finished] == [0, 1]
    assert [c.function.name for c in whole[1]] == ["get_weather", "get_time"]
    assert whole[1][0].id == call_id("job-1", 0) != call_id("job-2", 0)


def test_forced_calls_come_from_the_json_list():
    content = '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]'
    out = ToolOutput("j", "forced", get_parser("hermes"))
    text, calls = out.feed(content)  # the call is finished when its object closes
    assert out.flush() == ("", [])
    assert text == "" and calls[0][0] == "tool_call" and calls[0][2].function.name == "get_weather"
    assert json.loads(calls[0][2].function.arguments) == {"city": "Oslo"}
    assert forced_calls("not json") == [] and forced_calls('{"name": "x"}') == []
    # The R1-style reasoner writes the opener its template taught it; the grammar then holds
    # what follows it (found trying the docs' example against `stepwise up`).
    (call,) = forced_calls('<tool_call>[{"name": "get_weather", "parameters": {"city": "P"}}]')
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "P"}


def test_content_without_calls_stays_as_written():
    out = ToolOutput("j", "parse", get_parser("hermes"))
    assert out.whole("The answer is 4.") == ("The answer is 4.", [])


def test_the_parser_follows_the_format_unless_configured():
    assert parser_name("", "qwen3") == "hermes" and parser_name("", "mistral") == "mistral"
    assert parser_name("", "gpt_oss") == "openai" and parser_name("", "tiny") == "hermes"
    assert parser_name("llama3_json", "qwen3") == "llama3_json"


DATA = Path(__file__).resolve().parents[2] / "data" / "tool_calls"
STREAMING = (
    "hermes",
    "llama3_json",
    "kimi_k2",
    "deepseek_v3",
    "mistral",
)  # parsers that read a call in progress


def vllm_outputs():
    for path in sorted(DATA.glob("*.json")):
        data = json.loads(path.read_text())
        for case in data["cases"]:
            yield pytest.param(
                data["parser"], case["model_output"], id=f"{data['parser']}/{case['id']}"
            )


def events(parser: str, text: str, size: int) -> list:
    out, calls = ToolOutput("job-1", "parse", get_parser(parser)), []
    for i in range(0, len(text), size):
        calls += out.feed(text[i : i + size])[1]
    return calls + out.flush()[1]


@pytest.mark.parametrize("size", [1, 4, 10_000])
@pytest.mark.parametrize("parser, text", list(vllm_outputs()))
def test_streamed_fragments_add_up_to_each_finished_call(parser, text, size):
    """vLLM's parser cases streamed: a call's deltas (its id and name first, then fragments)
    add up to the finished call, which follows them; a call never streamed comes whole."""
    calls = events(parser, text, size)
    finished = {i: c for kind, i, c in calls if kind == "tool_call"}
    assert list(finished) == list(range(len(finished)))
    for i, call in finished.items():
        deltas = [c for kind, j, c in calls if kind == "tool_call_delta" and j == i]
        if deltas:
            assert {(d.id, d.function.name) for d in deltas} == {(call.id, call.function.name)}
            assert "".join(d.function.arguments for d in deltas) == call.function.arguments
            last = max(
                n for n, (kind, j, _) in enumerate(calls) if kind == "tool_call_delta" and j == i
            )
            assert (
                last
                < [n for n, (kind, j, _) in enumerate(calls) if kind == "tool_call" and j == i][0]
            )


def test_arguments_stream_while_the_call_is_written():
    """Character by character, a call's name comes before its arguments are finished, and the
    arguments in many fragments, for each parser that reads a call in progress."""
    outputs = {
        "hermes": CONTENT,
        "llama3_json": '{"name": "get_weather", "parameters": {"city": "Paris", "days": 3}}',
        "kimi_k2": "<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0"
        '<|tool_call_argument_begin|>{"city": "Paris", "days": 3}<|tool_call_end|>'
        "<|tool_calls_section_end|>",
        "mistral": '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris", "days": 3}',
        "deepseek_v3": "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>"
        'get_weather\n```json\n{"city": "Paris", "days": 3}\n```<｜tool▁call▁end｜>'
        "<｜tool▁calls▁end｜>",
    }
    assert set(outputs) == set(STREAMING)
    for parser, text in outputs.items():
        calls = events(parser, text, 1)
        deltas = [c for kind, i, c in calls if kind == "tool_call_delta" and i == 0]
        assert deltas[0].function.name == "get_weather", parser
        assert sum(1 for d in deltas if d.function.arguments) >= 5, parser
        (call,) = [c for kind, i, c in calls if kind == "tool_call" and i == 0]
        assert json.loads(call.function.arguments)["city"] == "Paris"


def test_a_forced_list_streams_its_calls_too():
    """tool_choice required / named: the grammar's JSON list, after the opener the model wrote,
    streams as the parsers' calls do; its content stays empty."""
    out = ToolOutput("j", "forced", get_parser("hermes"))
    content = (
        '<tool_call>[{"name": "get_weather", "parameters": {"city": "Oslo"}}, '
        '{"name": "get_time", "parameters": {"zone": "CET"}}]'
    )
    calls = []
    for ch in content:
        text, found = out.feed(ch)
        assert text == ""
        calls += found
    text, found = out.flush()
    calls += found
    finished = [c for kind, _, c in calls if kind == "tool_call"]
    assert text == "" and [c.function.name for c in finished] == ["get_weather", "get_time"]
    assert [c for _, c in enumerate(finished)] == out.whole(content)[1]
    for i, call in enumerate(finished):
        deltas = [c for kind, j, c in calls if kind == "tool_call_delta" and j == i]
        assert len(deltas) > 3 and deltas[0].function.name == call.function.name
        assert "".join(d.function.arguments for d in deltas) == call.function.arguments


def test_a_forced_list_that_holds_no_call_is_content():
    out = ToolOutput("j", "forced", get_parser("hermes"))
    assert out.feed("I cannot") == ("", [])
    assert out.flush() == ("I cannot", [])
