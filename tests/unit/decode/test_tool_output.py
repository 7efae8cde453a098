"""A job's tool calls read from its content (pure): by the parser, whole and streamed alike,
and from a forced JSON list; ids the same on every replay."""

from __future__ import annotations

import json

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
    assert whole[0] == text == "Let me check."
    assert [c for _, c in calls] == whole[1] and [i for i, _ in calls] == [0, 1]
    assert [c.function.name for c in whole[1]] == ["get_weather", "get_time"]
    assert whole[1][0].id == call_id("job-1", 0) != call_id("job-2", 0)


def test_forced_calls_come_from_the_json_list():
    content = '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]'
    out = ToolOutput("j", "forced", get_parser("hermes"))
    assert out.feed(content) == ("", [])  # held until the list is whole
    text, calls = out.flush()
    assert text == "" and calls[0][1].function.name == "get_weather"
    assert json.loads(calls[0][1].function.arguments) == {"city": "Oslo"}
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
