"""Named quantities bound once: a quantity the problem or a step states (`One pair of pants
costs $22.50`) keeps its value; a later step that states the same quantity with another value
(`One pair of pants costs $16`) is contradicted, with both spans.

A quantity is named by the words that lead to its number in its clause and by its unit
(quantities.py): `one pair of pants costs` + `dollar`. Only names that say enough are bound:
three words or more, one of them a word of four letters or more, none that marks a change
(`now`, `left`, `after`, `more`, `total`...) or a supposition (`if`, `would`). A name the problem
itself gives two values is ambiguous and never bound. Words a solution changes in restating
(`Bernadette will take` for `Bernadette's drive takes`) name another quantity: missed, never
a false contradiction — the side a checker must err on.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction

from pipeline.verify.quantities import Quantity, quantities

MIN_NAME_WORDS = 4
NAME_WORDS = 5  # the words before a number that name it
_CHANGE = frozenset(
    "now left after more less fewer another other others remaining remain remains rest new "  # noqa: SIM905
    "total altogether together combined all each every per additional extra still again "
    "if would could should suppose assume assuming say instead then next later first second "
    "third last before initially originally now finally than off # x answer "
    "answers result results".split()
)
_SMALL = frozenset(
    "the a an his her their its our my your is are was were be has have had does did do "  # noqa: SIM905
    "to for at in on with by from he she they it we you i that this these those".split()
)


@dataclass(frozen=True, slots=True)
class Binding:
    """A value stated for a named quantity, and where: `source` is "the problem" or "step N"."""

    value: Fraction
    source: str
    span: tuple[int, int]
    text: str


def name_of(q: Quantity) -> tuple[str, ...] | None:
    """The words that name `q`'s quantity (with its unit), or None when they say too little."""
    words = q.context[-NAME_WORDS:]
    if not q.unit:  # "since the number following the 1 is 5": a digit named, not a quantity
        return None
    if len(words) < MIN_NAME_WORDS or any(w in _CHANGE for w in q.context):
        return None
    if not any(len(w) >= 4 and w not in _SMALL for w in words):
        return None
    return (*words, q.unit)


class Bindings:
    """The named quantities of a job so far, each with the one value it was given."""

    def __init__(self, problem: str = "") -> None:
        self._bound: dict[tuple[str, ...], Binding] = {}
        ambiguous: set[tuple[str, ...]] = set()
        for q, name in _named(problem):
            old = self._bound.get(name)
            if old is not None and old.value != q.values[0]:
                ambiguous.add(name)
            self._bound.setdefault(name, _binding(problem, q, "the problem"))
        for name in ambiguous:
            del self._bound[name]

    def conflicts(self, step: str) -> list[tuple[Binding, Binding]]:
        """(this step's statement, the earlier one) for each quantity `step` gives a value other
        than the one it was bound to."""
        out = []
        for q, name in _named(step):
            old = self._bound.get(name)
            if old is not None and old.value != q.values[0]:
                out.append((_binding(step, q, "this step"), old))
        return out

    def accept(self, step: str, source: str) -> None:
        """Bind the quantities `step` names that are not bound yet."""
        for q, name in _named(step):
            self._bound.setdefault(name, _binding(step, q, source))


@functools.lru_cache(maxsize=1024)  # a checker reads each step twice (check, then accept)
def _named(text: str) -> tuple[tuple[Quantity, tuple[str, ...]], ...]:
    out = []
    for q in quantities(text):
        if not text[q.span[0] : q.span[0] + 1].isdigit() or len(q.values) != 1:
            continue  # a number in words, a fraction or a percentage: not a named value
        name = name_of(q)
        if name is None or _computed(text, q.span):
            continue  # an operand or a result: what a claim says, not a quantity's statement
        rate = _RATE.match(text, q.span[1])  # "$5.50 per shoe" is not "$11.00" for two
        out.append((q, (*name, "per") if rate else name))
    return tuple(out)


_RATE = re.compile(r"\s*(?:[A-Za-z]+\s+){0,2}?(?:per|each|every|an?)\b", re.IGNORECASE)


def _computed(text: str, span: tuple[int, int]) -> bool:
    """The number's clause computes (`=`, `<<...>>`, an operator next to the number or to its
    unit: `5 tasks * $2.00 each`)."""
    start = _clause_start(text, span[0])
    end = _SENTENCE_END.search(text, span[1], span[1] + _WINDOW)
    clause = text[start : end.start() if end else span[1] + _WINDOW]
    if any(c in clause for c in "=<>"):
        return True
    before = text[max(0, span[0] - 3) : span[0]].rstrip("$€£ ")
    after = _UNIT_WORD.sub("", text[span[1] : span[1] + 40], count=1).lstrip()
    return before[-1:] in _OPERATORS or after[:1] in _OPERATORS


_OPERATORS = frozenset("+-*/×÷x^")
_SENTENCE_END = re.compile(r"[.;!?](?!\d)|\n")
_UNIT_WORD = re.compile(r"^\s*[A-Za-z]+")


def _binding(text: str, q: Quantity, source: str) -> Binding:
    start = _clause_start(text, q.span[0])
    end = q.span[1]
    rest = text[end : end + 30]
    word_end = len(rest) - len(rest.lstrip()) + len(rest.lstrip().split(" ", 1)[0])
    snippet = text[start : end + word_end].strip()
    return Binding(q.values[0], source, (start, end), snippet[:100])


def _clause_start(text: str, at: int) -> int:
    lo = max(0, at - _WINDOW)  # a clause is short: looking further back costs, finds nothing
    cut = max(text.rfind(c, lo, at) for c in ".;:!?\n")
    comma = text.rfind(", ", lo, at)
    return max(cut, comma, lo - 1) + 1


_WINDOW = 200  # characters either side of a number that its clause may span
