"""Finding the final answer in a completion (shared by every format).

Styles, by priority (within one, the last occurrence wins):
0. `\\boxed{…}` / `\\fbox{…}`, braces balanced (`\\boxed{\\frac{1}{2}}`);
1. stated: "the (final) answer is …" up to the sentence's end (a period followed by a space or
   the end: `3.5` is a number), `Answer: …` / `Final Answer: …` / `**Answer:** …` (the rest of
   the line), GSM8K's `#### 72`;
2. markdown bold `**72**` (a last resort: bold is also used for headings and emphasis).
A boxed answer beats a stated one even when earlier, since a model that boxes marks its final
answer that way; a stated answer whose text holds `\\boxed` is left to the boxed style (so an
unclosed `\\boxed{7` is never taken as an answer).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BOXED, STATED, BOLD = 0, 1, 2

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_IS = re.compile(r"\banswer\s+is\b[ \t]*:?[ \t]*", re.IGNORECASE)
_COLON = re.compile(r"\banswer\b[ \t*]*:[ \t*]*", re.IGNORECASE)
_HASHES = re.compile(r"^[ \t]*####[ \t]*", re.MULTILINE)
_BOLD = re.compile(r"\*\*([^*\n]+?)\*\*")
_SENTENCE_END = re.compile(r"\.(?=\s|$)")
_THOUSANDS = re.compile(r"-?\d{1,3}(?:,\d{3})+(?:\.\d+)?")
_WRAPPER = re.compile(r"\\(?:text|textbf|mathrm|mathbf)\s*\{")
_MATH_DELIMS = (("$$", "$$"), ("\\[", "\\]"), ("\\(", "\\)"), ("$", "$"), ("**", "**"))


@dataclass(frozen=True, slots=True)
class Found:
    """One answer occurrence: where it is in the text, its style and its normalized value."""

    start: int
    end: int
    style: int
    value: str


def closing_brace(text: str, start: int = 0) -> int | None:
    """Index of the `}` that closes a brace opened just before `start`, or None."""
    depth = 1
    for i in range(start, len(text)):
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
            if depth == 0:
                return i
    return None


def _unwrap(value: str) -> str:
    """One layer of wrapping around the whole value, if any."""
    for left, right in _MATH_DELIMS:
        inner = value[len(left) : len(value) - len(right)]
        if (
            len(value) >= len(left) + len(right)
            and value.startswith(left)
            and value.endswith(right)
            and left not in inner  # `$a$ and $b$` is not one wrapped value
        ):
            return inner
    m = _WRAPPER.match(value)
    if m and closing_brace(value, m.end()) == len(value) - 1:
        return value[m.end() : -1]
    return value


def normalize(value: str) -> str:
    """Light normalization: wrappers (`$…$`, `\\(…\\)`, `\\text{…}`, bold) and a trailing period
    off, `1,200` → `1200`; the rest (`x = 5`, `\\frac{1}{2}`) as written."""
    while True:
        before = value
        value = value.strip()
        if value.endswith(".") and not value.endswith(".."):
            value = value[:-1].rstrip()
        value = _unwrap(value)
        if value == before:
            break
    if _THOUSANDS.fullmatch(value):
        value = value.replace(",", "")
    return value


def _boxed(text: str) -> list[Found]:
    found = []
    for m in _BOX.finditer(text):
        close = closing_brace(text, m.end())
        if close is not None:
            found.append(Found(m.start(), close + 1, BOXED, normalize(text[m.end() : close])))
    return found


def _line_end(text: str, pos: int) -> int:
    end = text.find("\n", pos)
    return len(text) if end < 0 else end


def _stated(text: str) -> list[Found]:
    found = []
    for m in _IS.finditer(text):
        end = _line_end(text, m.end())
        stop = _SENTENCE_END.search(text, m.end(), end)
        end = stop.start() if stop else end
        found.append(Found(m.start(), end, STATED, text[m.end() : end]))
    for pattern in (_COLON, _HASHES):
        for m in pattern.finditer(text):
            end = _line_end(text, m.end())
            found.append(Found(m.start(), end, STATED, text[m.end() : end]))
    return [
        Found(f.start, f.end, f.style, normalize(f.value))
        for f in found
        if "\\boxed" not in f.value and "\\fbox" not in f.value
    ]


def _bold(text: str) -> list[Found]:
    return [
        Found(m.start(), m.end(), BOLD, normalize(m.group(1)))
        for m in _BOLD.finditer(text)
        if not m.group(1).rstrip().endswith(":")  # a heading ("**Step 1:**"), not an answer
    ]


def find_all(text: str, *, bold: bool = True) -> list[Found]:
    """Every answer occurrence with a non-empty value, in text order."""
    found = _boxed(text) + _stated(text) + (_bold(text) if bold else [])
    return sorted((f for f in found if f.value), key=lambda f: (f.start, f.style))


def find_answer(text: str, *, bold: bool = True) -> str | None:
    """The final answer of `text`: the best style present, its last occurrence; else None.

    `bold=False` leaves out bold text (to tell whether a paragraph *states* an answer).
    """
    found = find_all(text, bold=bold)
    if not found:
        return None
    best = min(f.style for f in found)
    return max((f for f in found if f.style == best), key=lambda f: f.start).value


def has_answer(text: str) -> bool:
    """Does `text` state an answer (boxed or stated; bold alone does not count)?"""
    return find_answer(text, bold=False) is not None


def answer_after(cue: str, continuation: str) -> str | None:
    """The answer a cue asked for: the first one in `cue + continuation` that ends past the
    cue (so "The answer is" + " 7." gives "7", and a later answer in the continuation loses)."""
    text = cue + continuation
    for f in find_all(text):
        if f.end > len(cue):
            return f.value
    return None


def until_closing_brace(continuation: str) -> str | None:
    """The answer after a cue ending in an open brace (`\\boxed{`): up to the matching `}`;
    None when it never closes (the answer was cut off) or is empty."""
    close = closing_brace(continuation)
    if close is None:
        return None
    return normalize(continuation[:close]) or None
