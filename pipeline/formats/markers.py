"""Thinking blocks delimited by a start and an end marker (`<think>` … `</think>`).

Semantics, the same for a whole text and for a stream:
* the generation starts inside or outside thinking (decided by the prompt, see
  `state_after`); each marker is removed from the output;
* a start marker outside thinking opens a block, an end marker inside closes it; a marker that
  changes nothing (a `<think>` the model writes although the template already opened the
  block, a second `</think>`) is dropped and the segment goes on;
* text inside blocks is reasoning, text outside is content (segments joined as in `split.py`).

Streaming holds back the longest tail of the text that could still become a marker
(`<`, `</th`, …), so a marker cut across deltas at any position is found exactly as in the
whole text; the tail is released as text once the next delta (or the end) rules a marker out.
"""

from __future__ import annotations

import re
from functools import lru_cache

from pipeline.formats.split import Split, TwoPartSplitter, join_segments


class Markers:
    """A compiled start/end marker pair."""

    __slots__ = ("start", "end", "pattern", "_longest")

    def __init__(self, start: str, end: str) -> None:
        if not start or not end or start == end:
            raise ValueError(f"thinking markers must be two different strings: {start!r} {end!r}")
        self.start, self.end = start, end
        # Longest first: were one marker a prefix of the other, the longer one must win.
        alternatives = sorted((start, end), key=len, reverse=True)
        self.pattern = re.compile("|".join(re.escape(m) for m in alternatives))
        self._longest = max(len(start), len(end))

    def partial_tail(self, text: str) -> int:
        """Length of the longest tail of `text` that is a proper prefix of a marker."""
        for k in range(min(len(text), self._longest - 1), 0, -1):
            tail = text[-k:]
            if self.start.startswith(tail) or self.end.startswith(tail):
                return k
        return 0

    def state_after(self, text: str, inside: bool) -> bool:
        """Inside thinking after `text`, starting from `inside`: the last marker decides."""
        found = self.pattern.findall(text)
        return found[-1] == self.start if found else inside

    def strip(self, text: str) -> str:
        return self.pattern.sub("", text)


@lru_cache(maxsize=64)
def markers(start: str, end: str) -> Markers:
    """The compiled pair (cached: formats are created per request, the regex need not be)."""
    return Markers(start, end)


def split_markers(text: str, m: Markers, inside: bool) -> Split:
    """The whole-text split (the reference the streaming splitter must reproduce)."""
    segments: dict[bool, list[str]] = {True: [], False: []}
    current: list[str] = []
    pos = 0
    for match in m.pattern.finditer(text):
        current.append(text[pos : match.start()])
        pos = match.end()
        opens = match.group() == m.start
        if opens != inside:  # a marker that changes the state ends the segment
            segments[inside].append("".join(current))
            current, inside = [], opens
    current.append(text[pos:])
    segments[inside].append("".join(current))
    return Split(join_segments(segments[True]), join_segments(segments[False]))


class MarkerSplitter(TwoPartSplitter):
    """Streaming twin of `split_markers`."""

    def __init__(self, m: Markers, inside: bool) -> None:
        super().__init__()
        self._m = m
        self._inside = inside
        self._pending = ""  # a tail that may be the beginning of a marker

    def feed(self, delta: str) -> Split:
        buf = self._pending + delta
        while (match := self._m.pattern.search(buf)) is not None:
            self._emit(self._inside, buf[: match.start()])
            opens = match.group() == self._m.start
            if opens != self._inside:
                self._end_segment(self._inside)
                self._inside = opens
            buf = buf[match.end() :]
        keep = self._m.partial_tail(buf)
        self._emit(self._inside, buf[: len(buf) - keep])
        self._pending = buf[len(buf) - keep :]
        return self._take()

    def flush(self) -> Split:
        # A marker that never completed was text after all.
        self._emit(self._inside, self._pending)
        self._pending = ""
        return self._close()
