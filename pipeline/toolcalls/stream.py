"""Tool calls from streamed text: content flows as it comes until a call opener; from there the
text is held, and each call is handed on once it is finished (its closing marker seen, or the
output over). A marker cut across deltas is held until it resolves, as the reasoning formats'
splitters hold theirs. While a call is being written, `progress` gives its name as soon as it
is known and then its arguments in fragments (where the parser reads a call in progress), in
the form the finished call's `arguments` has (partial_json.py), as vLLM streams them."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.toolcalls.base import ParsedCall, ToolParser
from pipeline.toolcalls.partial_json import JsonCanon


@dataclass(frozen=True, slots=True)
class CallDelta:
    index: int  # the call's place among the output's calls
    call: ParsedCall


@dataclass(frozen=True, slots=True)
class ArgsDelta:
    """A call in progress: its name and id (from its first delta on), new argument text."""

    index: int
    name: str
    id: str | None
    arguments: str


def _partial_opener(text: str, openers: tuple[str, ...]) -> int:
    """The length of the longest suffix of `text` that begins an opener (held back)."""
    longest = 0
    for o in openers:
        for n in range(min(len(o) - 1, len(text)), longest, -1):
            if text.endswith(o[:n]):
                longest = n
                break
    return longest


class ToolCallStream:
    def __init__(self, parser: ToolParser) -> None:
        self.parser = parser
        self.buf = ""
        self.sent = 0  # characters of buf passed on as content
        self.region: int | None = None  # where the first opener starts
        self.emitted = 0  # calls handed on
        self.done = 0  # how much of the region holds only finished calls (after the last feed)
        self.live: int | None = None  # the call in progress: its index, and its arguments read
        self.canon = JsonCanon()

    def feed(self, delta: str) -> tuple[str, list[CallDelta]]:
        """(content to pass on now, calls finished now)."""
        self.buf += delta
        if self.region is None:
            start = self.parser.first_opener(self.buf, self.parser.openers)
            if start < 0:
                safe = len(self.buf) - _partial_opener(self.buf, self.parser.openers)
                return self._content_to(safe), []
            self.region = start
        content = self._content_to(self.region)
        region = self.buf[self.region :]
        done = self.parser.complete_prefix(region)
        if done <= self.done:  # no call finished since the last feed
            return content, []
        self.done = done
        return content, self._new_calls(self.parser.extract(region[:done]).calls)

    def progress(self) -> list[ArgsDelta]:
        """What is new of the call being written (after `feed`): nothing, or one delta."""
        if self.region is None:
            return []
        part = self.parser.partial(self.buf[self.region + self.done :])
        if part is None:
            return []
        first = self.live != self.emitted
        if first:
            self.live, self.canon = self.emitted, JsonCanon()
        args = self.canon.feed(part.arguments) if part.arguments is not None else ""
        if not (first or args):
            return []
        return [ArgsDelta(self.emitted, part.name, part.id, args)]

    def flush(self) -> tuple[str, list[CallDelta]]:
        """At the end of the output: the calls not yet handed on, and any content held back
        (all of it where the held text held no call after all)."""
        whole = self.parser.extract(self.buf)
        calls = self._new_calls(whole.calls)
        sent = self.buf[: self.sent]
        final = whole.content or ""
        rest = final[len(sent) :] if final.startswith(sent) else ""
        self.sent = len(self.buf)
        return rest, calls

    def _content_to(self, end: int) -> str:
        out = self.buf[self.sent : end] if end > self.sent else ""
        self.sent = max(self.sent, end)
        return out

    def _new_calls(self, calls: list[ParsedCall]) -> list[CallDelta]:
        new = [CallDelta(i, c) for i, c in enumerate(calls) if i >= self.emitted]
        self.emitted = max(self.emitted, len(calls))
        return new
