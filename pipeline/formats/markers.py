"""Thinking blocks delimited by marker strings (`<think>` … `</think>`, `[THINK]` … `[/THINK]`).

A format's `MarkerGrammar` names four kinds of marker: block starts, block ends, tool-call
openers (a tool call ends the thinking; the call itself is content, as written) and content
wrappers (`<response>`, `</answer>`: removed from the content). One state machine,
`MarkerSplitter`, reads them; the whole-text split is the same machine fed the whole text, so
a stream cut anywhere adds up to it by construction.

The generation starts in one of three states (`start_state`): inside thinking, in content, or
undecided (Qwen3 without a prompt to look at: the model writes `<think>` itself, unless the
template already opened the block). vLLM's semantics, which are the ecosystem's contract:
* undecided: text before a start marker is content; text before a lone end marker or a tool
  call was thinking (the template opened the block); text with no marker at all is content;
* inside thinking: the first start marker the generation writes is dropped (the template had
  opened the block); a later one is text; an end marker closes the block; a tool-call opener
  closes it too, the opener and the call going to the content;
* in content: a start marker opens another block (interleaved thinking); an end marker is
  text (vLLM keeps a second `</think>`), except the late end of a block a tool call closed,
  which is dropped; a wrapper is removed.

Streaming holds back the longest tail that could still become a marker (`<`, `</th`), and a
whole marker that a longer one begins with (`<|channel>` of `<|channel>thought`), so a marker
cut across deltas at any point is found exactly as in the whole text. Undecided text is held
until a marker (or the end) decides it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import lru_cache

from pipeline.formats.split import Split, TwoPartSplitter

THINKING, CONTENT, UNDECIDED = "thinking", "content", "undecided"
START, END, TOOL, WRAPPER = "start", "end", "tool", "wrapper"


class Lexicon:
    """A set of marker strings: finds them in text (the longest where one begins another) and
    tells a tail that may still grow into one, which a stream must hold back."""

    __slots__ = ("markers", "pattern", "_longest")

    def __init__(self, markers: Iterable[str]) -> None:
        self.markers = tuple(sorted(markers, key=len, reverse=True))
        self.pattern = re.compile("|".join(re.escape(m) for m in self.markers))
        self._longest = len(self.markers[0])

    def grows(self, text: str) -> bool:
        """Is `text` a proper prefix of some marker (it may still become that marker)?"""
        return any(len(m) > len(text) and m.startswith(text) for m in self.markers)

    def partial_tail(self, text: str) -> int:
        """Length of the longest tail of `text` that could still grow into a marker."""
        for k in range(min(len(text), self._longest - 1), 0, -1):
            if self.grows(text[-k:]):
                return k
        return 0

    def route(
        self, buf: str, final: bool, text: Callable[[str], None], marker: Callable[[str], None]
    ) -> str:
        """Hand `buf`'s text and markers, in order, to `text` and `marker`; return the tail held
        back because it may still become a marker (nothing when `final`: it was text)."""
        pos = 0
        for match in self.pattern.finditer(buf):
            if not final and self.grows(buf[match.start() :]):
                # A whole marker that may still become a longer one: held from there.
                text(buf[pos : match.start()])
                return buf[match.start() :]
            text(buf[pos : match.start()])
            marker(match.group())
            pos = match.end()
        rest = buf[pos:]
        keep = 0 if final else self.partial_tail(rest)
        text(rest[: len(rest) - keep])
        return rest[len(rest) - keep :]


@dataclass(frozen=True, slots=True)
class MarkerGrammar:
    """A format's markers by kind, compiled."""

    starts: tuple[str, ...]
    ends: tuple[str, ...]
    tool_calls: tuple[str, ...] = ()
    wrappers: tuple[str, ...] = ()
    kinds: dict[str, str] = field(init=False, repr=False, compare=False)
    lexicon: Lexicon = field(init=False, repr=False, compare=False)
    block_pattern: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.starts or not self.ends:
            raise ValueError("a marker grammar needs a start and an end marker")
        kinds: dict[str, str] = {}
        for kind, group in ((START, self.starts), (END, self.ends), (TOOL, self.tool_calls),
                            (WRAPPER, self.wrappers)):  # fmt: skip
            for m in group:
                if not m or m in kinds:
                    raise ValueError(f"marker {m!r} is empty or named twice")
                kinds[m] = kind
        object.__setattr__(self, "kinds", kinds)
        object.__setattr__(self, "lexicon", Lexicon(kinds))
        object.__setattr__(self, "block_pattern", Lexicon(self.starts + self.ends).pattern)


@lru_cache(maxsize=64)
def grammar(
    starts: tuple[str, ...],
    ends: tuple[str, ...],
    tool_calls: tuple[str, ...] = (),
    wrappers: tuple[str, ...] = (),
) -> MarkerGrammar:
    """The compiled grammar (cached: formats are made per request, the regexes need not be)."""
    return MarkerGrammar(starts, ends, tool_calls, wrappers)


def start_state(prompt: str, g: MarkerGrammar, default: str) -> str:
    """Where the generation starts: a prompt whose last block marker is a start (a template
    that opened the thinking) -> thinking; an end with only whitespace after it (a template
    that wrote a closed block: thinking off) -> content; otherwise `default`. An end followed
    by text is an earlier turn's, and says nothing about this one."""
    found = list(g.block_pattern.finditer(prompt))
    if not found:
        return default
    last = found[-1]
    if g.kinds[last.group()] == START:
        return THINKING
    return CONTENT if not prompt[last.end() :].strip() else default


class MarkerSplitter(TwoPartSplitter):
    """The marker state machine, delta by delta; `state` is where the text read so far ends."""

    def __init__(self, g: MarkerGrammar, state: str) -> None:
        super().__init__()
        self._g = g
        self.state = state
        self._opened = False  # has the generation written this block's start marker?
        self._tool_closed = False  # did a tool call close the last block (its end may follow)?
        self._undecided: list[str] = []  # text whose part a later marker decides
        self._pending = ""  # a tail that may still become a marker

    def _text(self, text: str) -> None:
        if self.state == UNDECIDED:
            self._undecided.append(text)
        else:
            self._emit(self.state == THINKING, text)

    def _decide(self, reasoning: bool) -> None:
        """The undecided text was this part; it ends there."""
        self._emit(reasoning, "".join(self._undecided))
        self._undecided.clear()
        self._end_segment(reasoning)

    def _marker(self, marker: str) -> None:
        kind = self._g.kinds[marker]
        if self.state == UNDECIDED:
            # The marker tells what the text before it was; go on as from that state.
            was_thinking = kind in (END, TOOL)
            self._decide(was_thinking)
            self.state = THINKING if was_thinking else CONTENT
        thinking = self.state == THINKING
        if kind == START:
            if thinking and self._opened:
                self._emit(True, marker)  # a second opener inside a block is text
            elif not thinking:
                self._end_segment(False)
                self.state, self._tool_closed = THINKING, False
            self._opened = True
        elif kind == END:
            if thinking:
                self._close_block(tool=False)
            elif self._tool_closed:
                # The late end of a block a tool call closed: dropped, like a block's end.
                self._end_segment(False)
                self._tool_closed = False
            else:
                self._emit(False, marker)  # an end with no block open is text
        elif kind == TOOL:
            if thinking:
                self._close_block(tool=True)
            self._emit(False, marker)  # the call is content, as written
        elif thinking:
            self._emit(True, marker)  # a wrapper inside the thinking is text
        # (a wrapper in the content is dropped)

    def _close_block(self, tool: bool) -> None:
        self._end_segment(True)
        self.state, self._opened, self._tool_closed = CONTENT, False, tool

    def feed(self, delta: str) -> Split:
        self._pending = self._g.lexicon.route(
            self._pending + delta, False, self._text, self._marker
        )
        return self._take()

    def flush(self) -> Split:
        # A marker that never completed was text after all; undecided text was content.
        self._g.lexicon.route(self._pending, True, self._text, self._marker)
        self._pending = ""
        if self.state == UNDECIDED:
            self._decide(False)
        return self._close()


def scan(text: str, g: MarkerGrammar, state: str) -> tuple[Split, str]:
    """The whole-text split and the state the text ends in."""
    splitter = MarkerSplitter(g, state)
    parts = splitter.feed(text) + splitter.flush()
    return parts, splitter.state


def strip_all(text: str, g: MarkerGrammar) -> str:
    """`text` with every marker removed (step texts as the verifier reads them)."""
    return g.lexicon.pattern.sub("", text)
