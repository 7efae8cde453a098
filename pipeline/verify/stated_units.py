"""Units carried over from where the problem stated a number: a bare product of two numbers
the problem stated in the same unit (`40 × 4 = 160` after "a final bill of $40.00" and "a $4.00
tip") multiplies dollars by dollars — arithmetic that is true and counts nothing. Minutes by
minutes, customers by customers, bolts by bolts: the classic trace of a wrong operation on the
problem's numbers, which no check of the arithmetic sees.

A number's unit is the one the problem stated it with (quantities.py; `16 eggs per day` is an
egg *rate*, `$2 per egg` a dollar rate). The claim is judged only when every text agrees:
both operands stated by the problem in that one unit, and in no other sense anywhere — not
bare in the problem (`3 times a week`), not with another unit or as a worked-out result in an
earlier step or this one (`2 + 2 = 4 people` then `$5 x 4`). Never judged: 1 and 2 (the
multipliers people write most; a 2 times itself is, where no text has a word that could
make one of them a multiplier: `both`, `twice`, `half`, `round trip`, `and`, `each`), units
of one letter (`4x + y = 13`: a variable), percentages, and any product in a job whose texts
speak of an area or a grid (`square`, `wide`, `10 ft by 12 ft`, `rows`, `tiles`, `m²`), where
like by like means something.

The same trace, with no unit: two terms of one ratio the problem states multiplied together
(`7 * 11 = 77` for ages in the ratio 7:11, whose terms add to 18 parts), unless a step worked
one of the values out (`36 / 9 = 4`, then `5 parts x 4`).

And two more of its kind. A multiplier the problem states once, applied to itself (`10 * 10`
for "10 times as many copies"), unless the problem applies it again and again (`each layer has
three times as many as the one above`) or a step worked the value out anew; a count or a rate
times itself is not judged (3 people on tricycles, 3 wheels each). Two rates the problem states
per the same span of time multiplied (`10 * 6` for "10 miles per hour" and "back at 6 mph"):
the product is per that span squared. `x * 1 = x` works nothing out. A value multiplied by
the number of times the problem states it counts its groups (`3 pairs of shorts, 3 pairs of
pants, and 3 pairs of shoes`: 3 * 3 = 9 pairs), and is not judged. A number stated nowhere
and never with a unit, times itself (`5 * 5` in a problem with no 5), counts nothing; nor
does a fraction's numerator the problem never states alone, times a number it states (`2 *
200` for "2/5 of the 200 students": the top of the fraction taken for the fraction), unless
a word makes a 2 by itself (`to and from`, `twice`, `both`).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction

from pipeline.verify.claim_ast import BinOp, Expr, Neg, Num, Pow, Relation
from pipeline.verify.found_claim import FoundClaim
from pipeline.verify.prose import find_claims
from pipeline.verify.quantities import Quantity, quantities
from pipeline.verify.verdicts import number_text

_NOT_COUNTS = frozenset({"", "percent"})
# A unit followed by what makes it a rate (`16 eggs per day`, `$2 per egg`, `4 pounds of food
# for every pound`): a rate times its own unit is a count (`4 pounds per pound * 20 pounds`).
_RATE = re.compile(
    r"\s*(?:[A-Za-z-]+(?:\s+of\s+[A-Za-z-]+(?:\s+[A-Za-z-]+)?)?\s+)?"
    r"(?:per|for\s+every|for\s+each|every|each|a|an)\b",
    re.IGNORECASE,
)
# 1 multiplies anything; 2 is the multiplier people write most (double, twice, both, a round
# trip), whatever else the problem stated as 2.
_MULTIPLIERS = frozenset({Fraction(1), Fraction(2)})
# ... except a 2 times itself (`2 * 2 = 4` for "2 centimeters every hour") where no word of
# any text gives a 2 a second sense: `both`, `twice`, `half`, `round trip`, two things joined
# by `and` (`2 candies on Mondays and Wednesdays`: 2 * 2), `each` (`Tom and Ann each ...`).
_TWO = Fraction(2)
_TWO_WORDS = re.compile(
    r"\b(?:both|round[- ]trips?|each way|there and back|back and forth|twins?|couples?|"
    r"second|again|doubles?|twice|pairs?|halve[sd]?|half|each|and)\b",
    re.IGNORECASE,
)
# Words that are a 2 by themselves (`and` and `each` make one only of two things joined).
_ROUND_TRIP = re.compile(
    r"\b(?:both|round[- ]trips?|each way|there and back|back and forth|to and from|twins?|"
    r"couples?|doubles?|twice|pairs?|halve[sd]?|half)\b",
    re.IGNORECASE,
)
# Words that make a quantity times one of its own kind mean something: an area, a grid.
_AREA = re.compile(
    r"\b(?:squares?|squared|areas?|wide|width|widths|rectangles?|rectangular|sq|acres?|tiles?"
    r"|carpet|cubes?|cubic|volume|grid|rows?|columns?)\b|[²³]|\^\s*[23]"
    r"|\d\s*(?:[a-z]+\s+)?by\s*\d",
    re.IGNORECASE,
)

# A rate per a span of time (`60 miles a week`, `3 days a week`, `6 mph`): two rates per the
# same span multiplied (miles a week * days a week) count nothing either.
_PER_TIME = re.compile(
    r"\s*(?:[A-Za-z-]+\s+(?:per|every|each|a|an)|per|every|each)\s+"
    r"(second|minute|hour|day|week|month|year)s?\b",
    re.IGNORECASE,
)
_PER_HOUR_UNITS = frozenset({"mph", "kph", "kmh"})
# `10 times as many`: a multiplier, applied once (`each layer has three times as many as the
# one above` applies it again and again).
_TIMES = re.compile(r"\s+times\b(?!\s+(?:a|an|per|every|each)\b)", re.IGNORECASE)
_REPEATED = re.compile(r"\b(?:each|every|per)\b", re.IGNORECASE)
_SENTENCE = re.compile(r"[^.!?]*[.!?]?")


# A ratio the problem states (`in the ratio of 7:11`, `3:4:5`): its terms share out a whole,
# so they add (7 + 11 = 18 parts) and scale; multiplied together they count nothing.
_RATIO = re.compile(r"(?<![\d.:])(\d+(?:\.\d+)?)(?:\s*:\s*(\d+(?:\.\d+)?))+(?![\d:])")
_RATIO_WORD = re.compile(r"\bratios?\b", re.IGNORECASE)


def _ratio_pairs(problem: str) -> dict[frozenset[Fraction], str]:
    """Each pair of different terms of one ratio the problem states -> the ratio's text."""
    if not _RATIO_WORD.search(problem):
        return {}
    out: dict[frozenset[Fraction], str] = {}
    for m in _RATIO.finditer(problem):
        terms = [Fraction(t.strip()) for t in m.group().split(":")]
        for i, a in enumerate(terms):
            for b in terms[i + 1 :]:
                if a != b:
                    out[frozenset((a, b))] = m.group()
    return out


class StatedUnits:
    """Value -> the units it was stated with, so far in a job."""

    def __init__(self, problem: str = "") -> None:
        self.units: dict[Fraction, set[str]] = {}
        self.areas = False  # a text speaks of an area or a grid: like by like means something
        self.twos = False  # a text has a word that may stand for a 2 (`both`, `round trip`)
        self.round_trips = False  # ... a word that is a 2 by itself (not `and`, `each`)
        stated = quantities(problem)
        self._add(problem, bare=True, read=stated)
        self.ratios = _ratio_pairs(problem)
        self.results: set[Fraction] = set()  # values earlier steps worked out (`36 / 9 = 4`)
        # Units are judged as the problem states them: a solution's own quantities multiply
        # legitimately (`15 tiles along * 12 tiles across`, worked out before; `6 * 3 minutes`
        # where 3 minutes is a rate per minute).
        self.problem_units = {v: frozenset(u) for v, u in self.units.items()}
        self.times_stated = Counter(q.values[0] for q in stated)
        for word in re.findall(r"\b([A-Za-z]+)-[A-Za-z]", problem):  # `three-eyed`, not read
            for q in quantities(word):
                self.times_stated[q.values[0]] += 1
        self.rates: dict[Fraction, set[str]] = {}  # value -> the spans of time it is a rate per
        self.multipliers: set[Fraction] = set()  # stated as `10 times as many`
        self.numerators = _numerators_only(stated)  # 2 of `2/5 are boys`, and no other 2
        for q in stated:
            per = _PER_TIME.match(problem, q.span[1])
            span = per.group(1).lower() if per else "hour" if q.unit in _PER_HOUR_UNITS else ""
            self.rates.setdefault(q.values[0], set()).add(span)
            if _TIMES.match(problem, q.span[1]):
                sentence = _SENTENCE.match(problem, problem.rfind(".", 0, q.span[0]) + 1)
                if not _REPEATED.search(sentence.group() if sentence else ""):
                    self.multipliers.add(q.values[0])

    def add(self, text: str, found: tuple[FoundClaim, ...] | None = None) -> None:
        """A step's numbers count from now on, bare ones too: a value a step worked out (`5 - 1
        = 4` posters) may coincide with one the problem stated in another sense (`$4`).
        `found`: the step's claims, where the caller has read them already."""
        self._add(text, bare=True)
        for claim in find_claims(text) if found is None else found:
            if claim.relation is not None and _works_out(claim.relation):
                self.results.add(claim.relation.rhs.value)

    def said(self, text: str) -> None:
        """A step that stays in the text although it is not accepted: its numbers were said
        (`3 x 7 = 24 days`, then `24 x 24 = 576 hours`), its results are not known."""
        self._add(text, bare=True)

    def _add(self, text: str, *, bare: bool, read: tuple[Quantity, ...] | None = None) -> None:
        self.areas = self.areas or bool(_AREA.search(text))
        self.twos = self.twos or bool(_TWO_WORDS.search(text))
        self.round_trips = self.round_trips or bool(_ROUND_TRIP.search(text))
        for value, unit in _stated(text, bare, read):
            self.units.setdefault(value, set()).add(unit)

    def squared(self, step: str, found: tuple[FoundClaim, ...]) -> dict[int, str]:
        """Claim index -> why it multiplies a quantity by another of its own unit."""
        products = [
            list(_products(c.relation.lhs, c.relation.rhs))
            if c.relation is not None and not c.alternative else []
            for c in found
        ]  # fmt: skip
        if not any(products) or self.areas or _AREA.search(step):
            return {}  # most steps: no product of two written numbers; or an area, a grid
        read = quantities(step)
        numbers = {q.values[0] for q in read}
        here: dict[Fraction, set[str]] = {}  # the step's own: its units, its results
        for value, unit in _stated(step, bare=False, read=read):
            here.setdefault(value, set()).add(unit)
        out: dict[int, str] = {}
        for i, claim in enumerate(found):
            if claim.relation is None or claim.alternative:
                continue
            for a, b in products[i]:
                ratio = self.ratios.get(frozenset((a, b)))
                worked_out = {a, b} & self.results or "" in here.get(a, set()) | here.get(b, set())
                if ratio is not None and not worked_out:
                    out[i] = (
                        f"{number_text(a)} and {number_text(b)} are terms of one ratio "
                        f"({ratio}): multiplied, they count nothing"
                    )
                    break
                why = self._squares(a, b, here) or self._same_span_rates(a, b, here)
                if why:
                    out[i] = why
                    break
                unit = _one_unit(self.units.get(a, set()) | here.get(a, set()))
                squares_two = a == b == _TWO and not (self.twos or _TWO_WORDS.search(step))
                if unit is None or (_MULTIPLIERS & {a, b} and not squares_two):
                    continue
                if unit != _one_unit(self.units.get(b, set()) | here.get(b, set())):
                    continue
                if self.times_stated[a] == b or self.times_stated[b] == a:
                    continue  # `3 pairs of shorts, 3 pairs of pants, 3 pairs of shoes`: 3 * 3
                if self.problem_units.get(a) == self.problem_units.get(b) == {unit}:
                    out[i] = (
                        f"{number_text(a)} and {number_text(b)} were both stated in {unit}: "
                        f"{unit} x {unit} counts nothing"
                    )
                    break
            if i not in out and (why := self._numerator(claim.relation, here, step, numbers)):
                out[i] = why  # a claim `a * b = c` as a whole, once
            if _works_out(claim.relation):  # worked out in this step
                here.setdefault(claim.relation.rhs.value, set()).add("")
            if isinstance(claim.relation.lhs, Num):
                here.setdefault(claim.relation.lhs.value, set()).add("")
        return out

    def _squares(self, a: Fraction, b: Fraction, here: dict[Fraction, set[str]]) -> str:
        """A number times itself where the problem states it once and nothing worked it out
        again (`10 * 10` for "10 times as many", `4 * 4` for "four vacations a year"); 1 and
        2 are judged apart (a 2 may be a `both`)."""
        # (a job whose problem states no number states nothing: `9*9=81` asked bare)
        if a == b and a not in _MULTIPLIERS and self.times_stated and not self.times_stated[a]:
            # stated nowhere, worked out nowhere, never with a unit (`60 seconds in a minute`
            # and `60 minutes in an hour` make 60 * 60 a conversion): a number from nowhere
            said = self.units.get(a, set()) | here.get(a, set())
            if a not in self.results and not said:
                return f"{number_text(a)} times itself: {number_text(a)} is stated nowhere"
        if a != b or a in _MULTIPLIERS or self.times_stated[a] != 1:
            return ""
        if a not in self.multipliers:
            # a count or a rate may meet itself through what the problem implies: 3 people on
            # tricycles (3 wheels), $12 a month for 12 months, 60 words a minute for an hour
            return ""
        if a in self.results or "" in here.get(a, set()):
            return ""
        return f"{number_text(a)} times itself: the problem states {number_text(a)} once"

    def _numerator(
        self, relation: Relation, here: dict[Fraction, set[str]], step: str, numbers: set[Fraction]
    ) -> str:
        """A product of a number the problem states and a numerator of a fraction it states,
        a numerator it never states alone (`2 * 200` for "2/5 of the 200 students"): the
        fraction's top taken for the fraction. Only a whole claim `a * b = c`: `10 * 2 / 3`
        takes two thirds the long way round, and so does `200 x 2 = 400` in a step that
        divides by the 5 (`400 / 5 = 80`). (`10 * 2 = 20` alone, then `20 / 3` in the next
        step, would be judged; none of GSM8K's 7,473 train references writes it so.)"""
        lhs = relation.lhs
        if not (isinstance(lhs, BinOp) and lhs.op == "*" and isinstance(relation.rhs, Num)):
            return ""
        if not (isinstance(lhs.left, Num) and isinstance(lhs.right, Num)):
            return ""
        for k, n in ((lhs.left.value, lhs.right.value), (lhs.right.value, lhs.left.value)):
            if k not in self.numerators or {k, n} & self.results or "" in here.get(k, set()):
                continue
            if n not in self.problem_units or k == n:
                continue
            if k == _TWO and (self.round_trips or _ROUND_TRIP.search(step)):
                continue  # a 2 of a round trip, a pair, a double
            if self.numerators[k] & numbers:
                continue  # the step divides by the fraction's bottom too: the long way round
            return (
                f"{number_text(k)} is stated only as a fraction's numerator: {number_text(k)} "
                f"times {number_text(n)} counts nothing"
            )
        return ""

    def _same_span_rates(self, a: Fraction, b: Fraction, here: dict[Fraction, set[str]]) -> str:
        """Two rates the problem states per the same span of time, multiplied (`60 miles a
        week * 3 days a week`): the product is per that span squared."""
        if a == b or _MULTIPLIERS & {a, b} or {a, b} & self.results:
            return ""
        spans = [self.rates.get(v, set()) for v in (a, b)]
        if any(len(s) != 1 or s == {""} for s in spans) or spans[0] != spans[1]:
            return ""
        units = [self.problem_units.get(v, frozenset()) for v in (a, b)]
        for v, u in zip((a, b), units, strict=True):  # stated in one sense, in every text
            if len(u) != 1 or self.units.get(v, set()) | here.get(v, set()) != set(u):
                return ""
        if units[0] == units[1]:
            return ""  # like by like: judged below
        (span,) = spans[0]
        return (
            f"{number_text(a)} and {number_text(b)} are both stated per {span}: multiplied, "
            f"they count nothing"
        )


def _stated(
    text: str, bare: bool, read: tuple[Quantity, ...] | None = None
) -> Iterator[tuple[Fraction, str]]:
    """Each number of `text` with its unit (`egg rate` for `16 eggs per day`); bare numbers
    (unit "") only when asked for."""
    for q in quantities(text) if read is None else read:
        if q.unit or bare:
            rate = q.unit and _RATE.match(text, q.span[1])
            yield q.values[0], q.unit + (" rate" if rate else "")


def _numerators_only(stated: tuple[Quantity, ...]) -> dict[Fraction, set[Fraction]]:
    """Numerators (2 and up) of the fractions among `stated` that no other number states (not
    a whole number, not a denominator: `2/5 ... 2/3`: 2; `2 boys, 2/5`: none) -> their
    fractions' denominators."""
    tops: dict[Fraction, set[Fraction]] = {}
    others: set[Fraction] = set()
    for q in stated:
        frac, *parts = q.values
        if len(parts) == 2 and parts[0] >= 2 and frac * parts[1] == parts[0]:
            tops.setdefault(parts[0], set()).add(parts[1])
            others.add(parts[1])
        else:
            others.update(q.values)
    return {top: bottoms for top, bottoms in tops.items() if top not in others}


def _works_out(relation: Relation) -> bool:
    """Whether a claim works a new value out: `= number`, not a restatement (`10 * 1 = 10`)."""
    if not isinstance(relation.rhs, Num):
        return False
    lhs = relation.lhs
    if isinstance(lhs, BinOp) and lhs.op in "*/":
        ones = [x for x in (lhs.left, lhs.right) if isinstance(x, Num) and x.value == 1]
        if ones and (lhs.op == "*" or lhs.right is ones[0]):
            other = lhs.right if lhs.left is ones[0] else lhs.left
            return not (isinstance(other, Num) and other.value == relation.rhs.value)
    return True


def _one_unit(units: set[str]) -> str | None:
    """The unit a value was always stated with, when it is a count or a measure whose square
    means nothing."""
    if not units or len(units) != 1:
        return None
    (unit,) = units
    if unit in _NOT_COUNTS or len(unit) < 2:  # `4x + y = 13`: a letter is a variable
        return None
    return unit


def _products(*exprs: Expr) -> Iterator[tuple[Fraction, Fraction]]:
    """The products of two written numbers in `exprs` (`16 * 3`, inside `(16 * 3) - 4`)."""
    for expr in exprs:
        if isinstance(expr, BinOp):
            if expr.op == "*" and isinstance(expr.left, Num) and isinstance(expr.right, Num):
                yield expr.left.value, expr.right.value
            yield from _products(expr.left, expr.right)
        elif isinstance(expr, Neg):
            yield from _products(expr.operand)
        elif isinstance(expr, Pow):
            yield from _products(expr.base, expr.exponent)
