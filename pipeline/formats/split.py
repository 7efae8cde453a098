"""The two parts of a generation (reasoning, content) and the streaming machinery they share.

Every format cuts its text into *segments*, each belonging to one part. A part is its segments,
each stripped of surrounding whitespace, joined by `SEGMENT_SEP` (empty ones left out). The
whole-text split (`join_segments`) and the streaming one (`PartWriter`) both follow that rule,
which is what makes "the deltas of a stream add up to the split of the whole text" hold: the
whitespace at a segment's edge is only known to be an edge once the segment ends, so the writer
holds back trailing whitespace until the next non-space character (or the segment's end) decides.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass

# Between two segments of one part (e.g. two thinking blocks): a paragraph break, so the text
# of one block does not run into the next.
SEGMENT_SEP = "\n\n"


@dataclass(frozen=True, slots=True)
class Split:
    """A generation cut in two: the thinking (markers stripped) and what follows it."""

    reasoning: str = ""
    content: str = ""

    def __add__(self, other: Split) -> Split:
        # Streamed deltas add up part by part (the invariant the tests check).
        return Split(self.reasoning + other.reasoning, self.content + other.content)


def join_segments(segments: Iterable[str], sep: str = SEGMENT_SEP) -> str:
    """One part from its raw segments: each stripped, empty ones dropped, joined by `sep`."""
    return sep.join(s for s in (seg.strip() for seg in segments) if s)


class PartWriter:
    """One part written as it streams: the incremental twin of `join_segments`."""

    __slots__ = ("sep", "_started", "_fresh", "_held")

    def __init__(self, sep: str = SEGMENT_SEP) -> None:
        self.sep = sep
        self._started = False  # anything written to this part yet (then a new segment needs sep)
        self._fresh = True  # at a segment's start: leading whitespace is dropped
        self._held = ""  # trailing whitespace: kept only if more text follows in this segment

    def write(self, text: str) -> str:
        """Text of the current segment; returns what can be emitted now."""
        if not text:
            return ""
        if self._fresh:
            text = text.lstrip()
            if not text:
                return ""
            head = self.sep if self._started else ""
            self._fresh, self._started = False, True
        else:
            head = self._held
        body = text.rstrip()
        if not body:  # only whitespace: it may be the segment's trailing edge
            self._held = head + text
            return ""
        self._held = text[len(body) :]
        return head + body

    def end_segment(self) -> None:
        """The current segment is over: its trailing whitespace is dropped."""
        self._held = ""
        self._fresh = True


class StreamSplitter(ABC):
    """Splits one generation delta by delta.

    For every text and every cut of it into deltas, the sum of the `feed()`s and the `flush()`
    equals the format's `split(text)`; text whose part is not decided yet (a possible partial
    marker, a line or paragraph whose role depends on what follows) is held back meanwhile.
    """

    @abstractmethod
    def feed(self, delta: str) -> Split:
        """The reasoning and content parts of this delta (either may be "")."""

    @abstractmethod
    def flush(self) -> Split:
        """End of stream: whatever was held back."""


class TwoPartSplitter(StreamSplitter):
    """A splitter that routes raw text to a reasoning and a content `PartWriter`."""

    def __init__(self) -> None:
        self._parts = {True: PartWriter(), False: PartWriter()}  # keyed by "is reasoning"
        self._out: dict[bool, list[str]] = {True: [], False: []}

    def _emit(self, reasoning: bool, text: str) -> None:
        out = self._parts[reasoning].write(text)
        if out:
            self._out[reasoning].append(out)

    def _end_segment(self, reasoning: bool) -> None:
        self._parts[reasoning].end_segment()

    def _take(self) -> Split:
        """What was emitted since the last call."""
        split = Split("".join(self._out[True]), "".join(self._out[False]))
        self._out[True].clear()
        self._out[False].clear()
        return split

    def _close(self) -> Split:
        """End both parts (trailing whitespace dropped) and return the rest."""
        self._end_segment(True)
        self._end_segment(False)
        return self._take()


class ContentSplitter(TwoPartSplitter):
    """Everything is content (stripped, like a whole-text split with no markers)."""

    def feed(self, delta: str) -> Split:
        self._emit(False, delta)
        return self._take()

    def flush(self) -> Split:
        return self._close()
