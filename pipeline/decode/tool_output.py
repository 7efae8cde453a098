"""A job's tool calls, read from its content (plain logic): by the model's tool-call parser
(`parse`), or from the JSON list a grammar forced (`forced`: tool_choice `required` or a named
function). Streamed: a call being written becomes `tool_call_delta` events (its id and name,
then its arguments in fragments that add up to the finished call's), a finished call a
`tool_call` event (whole); the rest stays content."""

from __future__ import annotations

import hashlib
import logging

from pipeline import schema
from pipeline.toolcalls import (
    ArgsDelta,
    CallDelta,
    ParsedCall,
    ToolCallStream,
    ToolParser,
    get_parser,
    parser_for_format,
)
from pipeline.toolcalls.forced import ForcedList

log = logging.getLogger(__name__)
FORCED = ForcedList()
FALLBACK_PARSER = "hermes"  # Qwen's and Hermes' `<tool_call>` JSON: the most common syntax


def parser_name(configured: str, format_name: str) -> str:
    return configured or parser_for_format(format_name) or FALLBACK_PARSER


def call_id(job_id: str, index: int) -> str:
    """A call's id, the same on every replay of the job (vLLM's shape, `chatcmpl-tool-…`)."""
    digest = hashlib.blake2b(f"{job_id}:{index}".encode(), digest_size=12).hexdigest()
    return f"chatcmpl-tool-{digest}"


def forced_calls(content: str) -> list[ParsedCall]:
    """The calls of a forced JSON list `[{"name": ..., "parameters": {...}}, ...]`."""
    return FORCED.extract(content).calls


CallOut = tuple[str, int, schema.ToolCall]  # (event kind, the call's index, the call or delta)


class ToolOutput:
    """One job's reading of tool calls from its content, whole and streamed."""

    def __init__(self, job_id: str, mode: str, parser: ToolParser) -> None:
        self.job_id = job_id
        self.mode = mode  # parse | forced
        # forced: the grammar's list read as a syntax of its own (pipeline/toolcalls/forced.py)
        self.reader = FORCED if mode == "forced" else parser
        self.stream = ToolCallStream(self.reader)
        self.streamed: dict[int, tuple[str, str]] = {}  # a call's (name, arguments) sent so far

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
        out = self.reader.extract(content)
        calls = [self.wire(i, c) for i, c in enumerate(out.calls)]
        return (out.content or "") if calls else content, calls

    def feed(self, content: str) -> tuple[str, list[CallOut]]:
        """(content to pass on, call events: deltas of calls in progress, finished calls)."""
        text, done = self.stream.feed(content)
        calls = self._finished(done) + self._progress(self.stream.progress())
        # A forced list is all the content there is (and an opener the model wrote before it):
        # held, and given back at the end only if it held no call.
        return ("" if self.mode == "forced" else text), calls

    def flush(self) -> tuple[str, list[CallOut]]:
        text, done = self.stream.flush()
        if self.mode == "forced":
            text = "" if self.stream.emitted else self.stream.buf
        return text, self._finished(done)

    def _progress(self, deltas: list[ArgsDelta]) -> list[CallOut]:
        out: list[CallOut] = []
        for d in deltas:
            name, sent = self.streamed.get(d.index, (d.name, ""))
            self.streamed[d.index] = (name, sent + d.arguments)
            fragment = ParsedCall(name, d.arguments, d.id)
            out.append(("tool_call_delta", d.index, self.wire(d.index, fragment)))
        return out

    def _finished(self, done: list[CallDelta]) -> list[CallOut]:
        """Each finished call whole; one streamed in part first gets the rest of its arguments
        as a last delta (what a streamed client adds up to the call)."""
        out: list[CallOut] = []
        for d in done:
            call = self.wire(d.index, d.call)
            if d.index in self.streamed:
                name, sent = self.streamed.pop(d.index)
                args = call.function.arguments
                if name == call.function.name and args.startswith(sent):
                    if rest := args[len(sent) :]:
                        last = ParsedCall(name, rest, call.id)
                        out.append(("tool_call_delta", d.index, self.wire(d.index, last)))
                else:  # a name read again or duplicate keys: the whole call event is right
                    log.warning(
                        "job %s: call %d streamed as %s(%s…), finished as %s(%s)", self.job_id,
                        d.index, name, sent[:40], call.function.name, args[:40],
                    )  # fmt: skip
            out.append(("tool_call", d.index, call))
        return out
