"""The tiny reasoner's split: one step per line, the answer on a line `Answer: <value>`.

Rule: the content is the last answer line and whatever follows it; the reasoning is every line
before it (an earlier answer line the model went on from is reasoning too). With no answer line
everything is reasoning, like a thinking block that never closed.

Streaming emits a line as reasoning as soon as its first characters rule out `Answer:` (so the
steps stream with no delay), and holds an answer line and what follows until either a later
answer line turns it into reasoning or the stream ends.
"""

from __future__ import annotations

from pipeline.formats.split import Split, TwoPartSplitter, join_segments

_WORD = "answer"
_BLANK = " \t"


def answer_line_state(line: str) -> bool | None:
    """Is `line` an answer line (`[ \\t]*answer[ \\t]*:`, any case)? None: not decided yet."""
    s = line.lstrip(_BLANK).lower()
    if _WORD.startswith(s):  # "", "ans", "answer": the colon may still come
        return None
    if not s.startswith(_WORD):
        return False
    rest = s[len(_WORD) :].lstrip(_BLANK)
    return None if not rest else rest.startswith(":")


def is_answer_line(line: str) -> bool:
    """A complete line: an undecided one ("Answer" and no colon) is no answer line."""
    return answer_line_state(line) is True


def answer_value(line: str) -> str:
    """The value of an answer line: what follows the colon, stripped."""
    return line.split(":", 1)[1].strip()


def last_answer(text: str) -> str | None:
    """The value of the last answer line with a value (like `pipeline.decode.results.parse_answer`,
    but line-bound), or None."""
    for line in reversed(text.split("\n")):
        if is_answer_line(line) and (value := answer_value(line)):
            return value
    return None


def split_answer_lines(text: str) -> Split:
    lines = text.split("\n")
    last = next((i for i in range(len(lines) - 1, -1, -1) if is_answer_line(lines[i])), None)
    if last is None:
        return Split(join_segments([text]), "")
    return Split(join_segments(["\n".join(lines[:last])]), join_segments(["\n".join(lines[last:])]))


class AnswerLineSplitter(TwoPartSplitter):
    """Streaming twin of `split_answer_lines`."""

    def __init__(self) -> None:
        super().__init__()
        self._line = ""  # the current line while its role is undecided
        self._role: bool | None = None  # the current line's: None undecided, True answer line
        self._held: list[str] | None = None  # from the last answer line on (None: none yet)

    def _route(self, text: str) -> None:
        """Text of a line whose role is known (a non-answer line, or an answer line's rest)."""
        if self._held is not None:
            self._held.append(text)
        else:
            self._emit(True, text)

    def _decide(self, role: bool) -> None:
        self._role = role
        line, self._line = self._line, ""
        if role and self._held is not None:  # a later answer: the earlier one was reasoning
            self._emit(True, "".join(self._held))
        if role:
            self._held = []
        self._route(line)

    def _add(self, piece: str) -> None:
        """A piece of the current line (no newline in it)."""
        if self._role is not None:
            self._route(piece)
            return
        self._line += piece
        role = answer_line_state(self._line)
        if role is not None:
            self._decide(role)

    def feed(self, delta: str) -> Split:
        first, *rest = delta.split("\n")
        self._add(first)
        for piece in rest:  # each one starts a new line
            if self._role is None:
                self._decide(False)  # ended undecided ("Answer" with no colon): a step
            self._route("\n")
            self._role = None
            self._add(piece)
        return self._take()

    def flush(self) -> Split:
        if self._role is None:
            self._decide(False)
        if self._held is not None:
            self._emit(False, "".join(self._held))
            self._held = None
        return self._close()
