"""A job's tool calls, read from its content (plain logic): by the model's tool-call parser
(`parse`), or from the JSON list a grammar forced (`forced`: tool_choice `required` or a named
function). Streamed: finished calls become `tool_call` events, the rest stays content."""

from __future__ import annotations

import hashlib
import json

from pipeline import schema
from pipeline.toolcalls import (
    CallDelta,
    ParsedCall,
    ToolCallStream,
    ToolParser,
    get_parser,
    parser_for_format,
)

FALLBACK_PARSER = "hermes"  # Qwen's and Hermes' `<tool_call>` JSON: the most common syntax


def parser_name(configured: str, format_name: str) -> str:
    return configured or parser_for_format(format_name) or FALLBACK_PARSER


def call_id(job_id: str, index: int) -> str:
    """A call's id, the same on every replay of the job (vLLM's shape, `chatcmpl-tool-…`)."""
    digest = hashlib.blake2b(f"{job_id}:{index}".encode(), digest_size=12).hexdigest()
    return f"chatcmpl-tool-{digest}"


def forced_calls(content: str) -> list[ParsedCall]:
    """The calls of a forced JSON list `[{"name": ..., "parameters": {...}}, ...]`. The grammar
    starts after the thinking's end or a tool-call opener, and a model that writes the opener
    itself (`<tool_call>[...]`) has it in the content: the list is read from its `[`."""
    try:
        value, _ = json.JSONDecoder().raw_decode(content, max(content.find("["), 0))
    except json.JSONDecodeError:
        return []
    if not isinstance(value, list):
        return []
    return [
        ParsedCall(v["name"], json.dumps(v.get("parameters", {}), ensure_ascii=False))
        for v in value
        if isinstance(v, dict) and isinstance(v.get("name"), str)
    ]


class ToolOutput:
    """One job's reading of tool calls from its content, whole and streamed."""

    def __init__(self, job_id: str, mode: str, parser: ToolParser) -> None:
        self.job_id = job_id
        self.mode = mode  # parse | forced
        self.parser = parser
        self.stream = ToolCallStream(parser)
        self.held: list[str] = []  # forced: the JSON, read at the end

    @classmethod
    def for_handoff(cls, h: schema.Handoff, parser: str) -> ToolOutput | None:
        if h.tool_calls == "off":
            return None
        return cls(h.id, h.tool_calls, get_parser(parser))

    def wire(self, index: int, call: ParsedCall) -> schema.ToolCall:
        return schema.ToolCall(
            id=call.id or call_id(self.job_id, index),
            function=schema.FunctionCall(name=call.name, arguments=call.arguments),
        )

    def whole(self, content: str) -> tuple[str, list[schema.ToolCall]]:
        """The Result's content and calls."""
        if self.mode == "forced":
            calls = forced_calls(content)
            return ("" if calls else content), [self.wire(i, c) for i, c in enumerate(calls)]
        out = self.parser.extract(content)
        calls = [self.wire(i, c) for i, c in enumerate(out.calls)]
        return (out.content or "") if calls else content, calls

    def feed(self, content: str) -> tuple[str, list[tuple[int, schema.ToolCall]]]:
        if self.mode == "forced":
            self.held.append(content)
            return "", []
        text, done = self.stream.feed(content)
        return text, self._wired(done)

    def flush(self) -> tuple[str, list[tuple[int, schema.ToolCall]]]:
        if self.mode == "forced":
            content, calls = self.whole("".join(self.held))
            return content, list(enumerate(calls))
        text, done = self.stream.flush()
        return text, self._wired(done)

    def _wired(self, done: list[CallDelta]) -> list[tuple[int, schema.ToolCall]]:
        return [(d.index, self.wire(d.index, d.call)) for d in done]
