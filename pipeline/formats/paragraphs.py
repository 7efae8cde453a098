"""The plain format's split: reasoning in paragraphs, no markers.

Rule: paragraphs are separated by blank lines. The content starts at the last paragraph that
states an answer (`has_answer`) and runs to the end (a closing "Hope this helps!" stays with
its answer); when no paragraph states one, the content is the last paragraph (a one-paragraph
chat reply is all content, never reasoning). The reasoning is the paragraphs before the content.
Paragraphs are stripped and joined by one blank line in both parts. Inside the answering
paragraph, lines before its first answering line are reasoning too (SmolLM2 often writes its
steps one per line, then `#### 17` / `The answer is 17.`, with no blank line between).

Why this rule: it can be streamed with at most one paragraph of delay. A paragraph is decided
once a blank line *and* the next non-blank character follow it (only then is it known not to be
the last): if it states an answer it starts a new candidate content, otherwise it is reasoning,
unless a candidate content is already open (then it joins it). Text from the last answering
paragraph on is held until a later answering paragraph turns it into reasoning, or the end.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pipeline.formats.split import SEGMENT_SEP, Split, TwoPartSplitter

# A blank line: a newline, spaces or tabs (or a \r of \r\n), a newline.
BREAK = re.compile(r"\n[ \t\r]*\n")


def paragraphs(text: str) -> list[str]:
    """The non-blank paragraphs of `text`, stripped."""
    return [p for p in (piece.strip() for piece in BREAK.split(text)) if p]


def split_paragraphs(text: str, has_answer: Callable[[str], bool]) -> Split:
    paras = paragraphs(text)
    if not paras:
        return Split("", "")
    answering = [i for i, p in enumerate(paras) if has_answer(p)]
    first = answering[-1] if answering else len(paras) - 1
    reasoning, content = paras[:first], paras[first:]
    if answering:
        pre, rest = answer_lines(content[0], has_answer)
        reasoning, content = reasoning + pre, rest + content[1:]
    return Split(SEGMENT_SEP.join(reasoning), SEGMENT_SEP.join(content))


def answer_lines(para: str, has_answer: Callable[[str], bool]) -> tuple[list[str], list[str]]:
    """An answering paragraph as ([its lines before the first answering line], [the rest]),
    each part one paragraph (or none)."""
    lines = para.split("\n")
    k = next((i for i, line in enumerate(lines) if has_answer(line)), 0)
    pre = "\n".join(lines[:k]).strip()
    return ([pre] if pre else []), ["\n".join(lines[k:]).strip()]


class ParagraphSplitter(TwoPartSplitter):
    """Streaming twin of `split_paragraphs`."""

    def __init__(self, has_answer: Callable[[str], bool]) -> None:
        super().__init__()
        self._has_answer = has_answer
        self._buf = ""  # the current, undecided paragraph (and any break after it)
        self._held: list[str] | None = None  # paragraphs from the last answering one on

    def _emit_paragraph(self, para: str) -> None:
        self._emit(True, para)
        self._end_segment(True)  # paragraphs are segments: joined by one blank line

    def _decided(self, para: str) -> None:
        """A paragraph that is known not to be the last one."""
        if self._has_answer(para):
            for earlier in self._held or ():
                self._emit_paragraph(earlier)
            self._held = [para]
        elif self._held is not None:
            self._held.append(para)
        else:
            self._emit_paragraph(para)

    def feed(self, delta: str) -> Split:
        # An undecided break lies in the buffer's whitespace tail; text before the tail was
        # searched already (scanning from there keeps char-by-char streams linear).
        scan = len(self._buf.rstrip())
        self._buf += delta
        while (m := BREAK.search(self._buf, scan)) is not None:
            rest = self._buf[m.end() :]
            if not rest.strip():  # nothing after the break yet: this may be the last paragraph
                break
            para = self._buf[: m.start()].strip()
            if para:
                self._decided(para)
            self._buf, scan = rest, 0
        return self._take()

    def flush(self) -> Split:
        last = self._buf.strip()
        self._buf = ""
        held = self._held or []
        if last and self._has_answer(last):
            for earlier in held:
                self._emit_paragraph(earlier)
            content = [last]
        else:
            content = held + ([last] if last else [])
        if content and self._has_answer(content[0]):
            pre, rest = answer_lines(content[0], self._has_answer)
            for para in pre:
                self._emit_paragraph(para)
            content = rest + content[1:]
        self._held = None
        for para in content:
            self._emit(False, para)
            self._end_segment(False)
        return self._close()
