"""Repairs: a stated arithmetic value its own claim refutes, and the value it should have had.

Verify mode `repair` (docs/verification.md) is a calculator in the loop, as GSM8K's own
solutions were written with one: decode reads each claim the moment its value is written and
closed (`88 * 40 = 3120` followed by a word, a comma, a sentence's end, `$`, `\\)`, `>>`), and
when the claim has no unknowns and its left side computes another value, the wrong value is
replaced by the right one (`3120` -> `3520`; one with no finite decimal rounded as people
write it, `7 / 3 = 2` -> `2.33`) and the model goes on from there. Only what this module can
compute exactly is repaired: claims with no unknowns, and claims on unknowns the problem's own
equations fix (`Solve 2x + 3 = 11.`, then `x = 7` -> `x = 4`; an elimination's slipped
coefficient, `9x = 22 + 3` -> `5x = 22 + 3` when x is 5); everything else (other unknowns,
contradictions with earlier steps, relations) is left to the checker's verdict and rollback.

Pure logic: no engine, no tokens. `find_repair` reads text; decode maps its span to tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from fractions import Fraction

from pipeline.verify.as_meant import as_meant
from pipeline.verify.claim_ast import (
    DEFAULT_LIMITS,
    BinOp,
    ClaimError,
    ClaimLimits,
    Expr,
    Neg,
    Num,
    Pow,
    Var,
    at_values,
    evaluate,
    expr_variables,
    holds,
    literal_value,
)
from pipeline.verify.linear_system import LinearSystem
from pipeline.verify.prose import FoundClaim, find_claims, relations
from pipeline.verify.verdicts import number_text

# A number as written: optional sign, digits with thousands commas, decimals.
_LITERAL = re.compile(r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-−]?\.\d+")
# What may follow a value and still continue its expression: spaces then an operator, a digit,
# a parenthesis, `%`, a LaTeX operator or an operator's word. Anything else closes the value.
_OPERATOR_WORDS = ("times", "plus", "minus", "divided by", "multiplied by", "over", "x")
_CONTINUES = re.compile(
    r"[ \t]*(?:[-+*/×÷^(%\d−]|\\(?:times|cdot|div|frac|left|,)|\.\d"
    r"|(?:times|plus|minus|divided\s+by|multiplied\s+by|over|x)\b)"
)
# A value is only known closed once something other than spaces follows it; a `.` only with
# a space, a line end or markup after it (`3.` may still become `3.5`); a LaTeX command or a
# word still being written only once it is no operator's (`= 33 \` may become `= 33 \times`,
# `= 33 ti` `= 33 times`: the value goes on).
_OPEN_END = re.compile(r"[ \t]*(?:\.|\\[A-Za-z]*)?$")
# A left side that is one unknown with its coefficient, as written at a claim's start: `9x`,
# `9 x`, `9*x`, `9 \cdot x`, `x`.
_TERM = re.compile(r"(?P<c>\d+)?(?P<op>\s*(?:(?:\*|×|\\cdot|\\times)\s*)?)(?P<v>[A-Za-z])\b")
# A coefficient larger than this is no slip of an elimination.
_MAX_COEFFICIENT = 1000


@dataclass(frozen=True, slots=True)
class Repair:
    """Replace text[span] (`old`) by `new`: the value `claim` computes."""

    span: tuple[int, int]
    old: str
    new: str
    claim: str  # the claim as written, with its wrong value
    # The text after `span` stays as written (put back after `new`): a left side's coefficient
    # is repaired once its right side is written, and only the coefficient changes.
    keeps_rest: bool = False


def wrong_value_start(claim: str) -> int | None:
    """Where the wrong value of a false claim with no unknowns begins in its text (`58 - 16 =
    44`: at `44`; a chain's slipped link, `27 * 5 * 10 = 145 * 10`: at `145`); None when no
    one value is (a relation, a claim whose left side is wrong)."""
    found = find_repair(claim, final=True)
    return None if found is None or found.keeps_rest else found.span[0]


def closed_at(text: str, end: int) -> bool:
    """Has the value ending at `end` been closed by what follows it (so it cannot grow)?"""
    rest = text[end:]
    if _OPEN_END.fullmatch(rest):
        return False
    word = rest.lstrip(" \t")
    if word and any(w.startswith(word) for w in _OPERATOR_WORDS):
        return False
    return _CONTINUES.match(rest) is None


def false_claims(
    text: str, limits: ClaimLimits = DEFAULT_LIMITS, values: Mapping[str, Fraction] | None = None
) -> Iterator[tuple[FoundClaim, Fraction, Fraction]]:
    """The claims of `text` with no unknowns that are false whatever the state: (claim, its
    left side's value, its right side's), in order; with `values` (what the problem's equations
    fix, `problem_values`), also the claims on those variables only (`x = 7` when x is 4).
    Rounded values as meant, claims right with their units converted and alternatives are not
    false."""
    for claim in find_claims(text, limits):
        rel = claim.relation
        if rel is None or claim.alternative:
            continue
        if names := expr_variables(rel.lhs) | expr_variables(rel.rhs):
            rel = at_values(rel, values or {})
            if rel is None:
                continue
        try:
            lhs, rhs = evaluate(rel.lhs, limits), evaluate(rel.rhs, limits)
        except (ClaimError, ZeroDivisionError):
            continue
        if lhs is None or rhs is None or holds(lhs, rel.op, rhs):
            continue
        if _holds_converted(claim.converted, limits):
            continue
        # "10 / 3 = 3.33" is right as meant; a claim on unknowns is read as the checker reads
        # it, as written (`2x = 8 + 11` is no running total when x is 4).
        if not names and as_meant(rel, text[claim.span[1] : claim.span[1] + 80], limits):
            continue
        yield claim, lhs, rhs


def find_repair(
    text: str,
    *,
    final: bool = False,
    limits: ClaimLimits = DEFAULT_LIMITS,
    values: Mapping[str, Fraction] | None = None,
) -> Repair | None:
    """The first wrong value in `text` a repair can put right: a claim `lhs = value` with no
    unknowns (or only unknowns `values` fixes: `x = 7` -> `x = 4`, `3x = 10` -> `3x = 12`)
    whose `lhs` computes exactly to another value written as a decimal. With `final` false (the
    text is still being written) only values that are closed count. A wrong right side that is
    an expression on fixed unknowns (`9x = 22 + 3`) is not rewritten: measured, the model writes
    its expression again after the value put in its place (`9x = 19 + 3`), and loops; its
    left side's coefficient is (`9x = 22 + 3` -> `5x = 22 + 3` when x is 5: `_coefficient`)."""
    for claim, want, got in false_claims(text, limits, values):
        rel = claim.relation
        assert rel is not None
        if rel.op == "=" and literal_value(rel.rhs) is None:
            if expr_variables(rel.lhs) or expr_variables(rel.rhs):
                # `x = 10 - y` wrong: which number is, the equation does not say
                if (found := _coefficient(text, claim, values or {}, final, limits)) is not None:
                    return found
                continue
            # A chain's wrong link: `27 * 5 * 10 = 145 * 10` (27 * 5 is 135, not 145).
            if (found := _rhs_repair(text, claim, want, final, limits)) is not None:
                return found
            continue
        if rel.op != "=":
            continue
        span = _value_span(text, claim.span, got)
        if span is None or not (final or closed_at(text, span[1])):
            continue
        old = text[span[0] : span[1]]
        # A right value with no finite decimal (`10 / 3`) is written rounded, as people write
        # it (`3.33`): the checker reads that as meant (consistent: holds when rounded).
        new = _written_like(want, old) or _rounded_like(want, old)
        if expr_variables(rel.lhs) or expr_variables(rel.rhs):
            # `x = 3.33` when x is 10/3: the checker reads a claim on unknowns exactly.
            new = _written_like(want, old) or number_text(want)
        if new == old:
            continue
        start, end = claim.span
        return Repair(span, old, new, text[start:end])
    return None


def problem_values(
    problem: str, premises: Iterable[str] = (), limits: ClaimLimits = DEFAULT_LIMITS
) -> dict[str, Fraction]:
    """The variables the problem's own equations fix (`Solve 2x + 3 = 11.` -> x = 4; a 2x2
    system -> both): a claim on them has a value a repair can compute. A question's implied
    answer (`Compute 7 * 8.`) fixes nothing here: a solution names its own unknowns."""
    system = LinearSystem(limits)
    for text in (problem[: limits.max_step_chars], *premises):
        for rel in relations(find_claims(text, limits)):
            system.add(rel)
    return dict(system.values) if system.consistent else {}


def closed_false_claim(
    text: str,
    *,
    final: bool = False,
    limits: ClaimLimits = DEFAULT_LIMITS,
    values: Mapping[str, Fraction] | None = None,
) -> FoundClaim | None:
    """The first claim of `text` with no unknowns (or, with `values`, on those unknowns alone)
    that is false and written to its end (its value closed, or `final`): what decode rolls back
    the moment it is written. Claims come in text order, so a false claim still open is the
    text's last."""
    for claim, _, got in false_claims(text, limits, values):
        span = _value_span(text, claim.span, got)
        if final or closed_at(text, claim.span[1] if span is None else span[1]):
            return claim
    return None


def _rhs_repair(
    text: str, claim: FoundClaim, want: Fraction, final: bool, limits: ClaimLimits
) -> Repair | None:
    """A right side that is an expression (`145 * 10`) and one of its numbers the only one
    whose change makes the claim hold, written like it (an integer for an integer): that
    number repaired (`145` -> `135`). None when no number, or more than one, would do, or
    when the numbers as written are not the expression's (units, words, a percent)."""
    rel = claim.relation
    assert rel is not None
    a, b = claim.span
    eq = text.rfind("=", a, b)
    if eq < 0:
        return None
    stop = b
    while stop < len(text) and text[stop].isdigit():  # a span may stop before the last digit
        stop += 1
    written = list(_LITERAL.finditer(text, eq + 1, stop))
    nums = list(_numbers(rel.rhs))
    if len(written) != len(nums) or not written:
        return None
    for m, num in zip(written, nums, strict=True):
        raw = m.group().replace(",", "")
        if raw.startswith(("-", "−")) or Fraction(raw) != num:
            return None
    aligned = _mismatched_term(rel.lhs, rel.rhs, limits)
    candidates = []
    for i, m in enumerate(written):
        value = _solve_for(rel.rhs, i, want, limits)
        old = m.group()
        if value is None or value == nums[i] or value <= 0:
            continue
        if "." not in old and value.denominator != 1:
            continue
        new = _written_like(value, old)
        # A slip, not a rewrite: the one term unlike its left-side counterpart (when the sides
        # line up term by term), else one digit of a number of two or more.
        slip = i == aligned if aligned is not None else _one_digit_apart(old, new or "")
        if new is not None and slip:
            candidates.append((m.span(), old, new))
    if len(candidates) != 1:
        return None
    span, old, new = candidates[0]
    # Closed: the number and what follows it in the claim can no longer change.
    if not (final or closed_at(text, written[-1].end())):
        return None
    return Repair(span, old, new, text[a:b])


def _coefficient(
    text: str,
    claim: FoundClaim,
    values: Mapping[str, Fraction],
    final: bool,
    limits: ClaimLimits,
) -> Repair | None:
    """`9x = 22 + 3` when the problem fixes x = 5: a left side that is one fixed unknown times
    a coefficient (written or not), a right side with no unknowns, and a whole coefficient
    that makes it hold (25 / 5 = 5): the left side repaired (`9x` -> `5x`, `x` -> `2x`, `4x` ->
    `x`), the right side kept as written. An elimination that added or subtracted the
    equations got the coefficient wrong; the numbers it took from the problem are right."""
    rel = claim.relation
    assert rel is not None
    lhs = rel.lhs
    if isinstance(lhs, BinOp) and lhs.op == "*" and isinstance(lhs.left, Num):
        lhs = lhs.right
    if not isinstance(lhs, Var) or expr_variables(rel.rhs) or not values.get(lhs.name):
        return None
    a, b = claim.span
    term = _TERM.match(text, a)
    eq = text.find("=", a, b)
    if term is None or term.group("v") != lhs.name or eq < 0 or text[term.end() : eq].strip():
        return None
    if (term.group("c") is None) != (lhs is rel.lhs):  # `2 x` read as written, nothing else
        return None
    try:
        rhs = evaluate(rel.rhs, limits)
    except (ClaimError, ZeroDivisionError):
        return None
    if rhs is None:
        return None
    want = rhs / values[lhs.name]
    if want.denominator != 1 or not 1 <= want <= _MAX_COEFFICIENT:
        return None
    stop = b
    while stop < len(text) and text[stop].isdigit():  # a span may stop before the last digit
        stop += 1
    if not (final or closed_at(text, stop)):
        return None
    old = term.group()
    new = lhs.name if want == 1 else f"{want.numerator}{term.group('op')}{lhs.name}"
    if term.group("c") is None:
        new = lhs.name if want == 1 else f"{want.numerator}{lhs.name}"
    if new == old:
        return None
    return Repair(term.span(), old, new, text[a:b], keeps_rest=True)


def _terms(expr: Expr) -> list[Expr]:
    """The top-level terms of a sum or difference (`a * b + c - d` -> [a * b, c, d])."""
    if isinstance(expr, BinOp) and expr.op in "+-":
        return [*_terms(expr.left), expr.right]
    return [expr]


def _mismatched_term(lhs: Expr, rhs: Expr, limits: ClaimLimits) -> int | None:
    """`12 * 10 + 12 * 5 = 120 + 70`: the index of the one right-side number (each term a number)
    that is not its left-side term's value; None when the sides do not line up so."""
    left, right = _terms(lhs), _terms(rhs)
    if len(left) != len(right) or len(left) < 2 or not all(isinstance(t, Num) for t in right):
        return None
    try:
        values = [evaluate(t, limits) for t in left]
    except (ClaimError, ZeroDivisionError):
        return None
    off = [i for i, (v, t) in enumerate(zip(values, right, strict=True)) if v != t.value]
    return off[0] if len(off) == 1 else None


def _one_digit_apart(old: str, new: str) -> bool:
    if len(old) != len(new) or sum(c.isdigit() for c in old) < 2:
        return False
    return sum(a != b for a, b in zip(old, new, strict=True)) == 1


def _numbers(expr: Expr) -> Iterator[Fraction]:
    """The expression's number literals, left to right as written."""
    if isinstance(expr, Num):
        yield expr.value
    elif isinstance(expr, Neg):
        yield from _numbers(expr.operand)
    elif isinstance(expr, BinOp):
        yield from _numbers(expr.left)
        yield from _numbers(expr.right)
    elif isinstance(expr, Pow):
        yield from _numbers(expr.base)
        yield from _numbers(expr.exponent)


def _with_number(expr: Expr, index: int, value: Fraction) -> tuple[Expr, int]:
    """`expr` with its `index`-th number literal replaced by `value`; (new expr, literals seen)."""
    if isinstance(expr, Num):
        return (Num(value) if index == 0 else expr), 1
    if isinstance(expr, Neg):
        inner, n = _with_number(expr.operand, index, value)
        return Neg(inner), n
    if isinstance(expr, BinOp | Pow):
        left_expr, right_expr = (
            (expr.left, expr.right) if isinstance(expr, BinOp) else (expr.base, expr.exponent)
        )
        left, n = _with_number(left_expr, index, value)
        right, m = _with_number(right_expr, index - n, value)
        if isinstance(expr, BinOp):
            return BinOp(expr.op, left, right), n + m
        return Pow(left, right), n + m
    return expr, 0


def _solve_for(expr: Expr, index: int, want: Fraction, limits: ClaimLimits) -> Fraction | None:
    """The value of the `index`-th literal that makes `expr` equal `want`, when `expr` is
    linear in it (checked at three points); None otherwise."""
    try:
        f = [evaluate(_with_number(expr, index, Fraction(v))[0], limits) for v in (0, 1, 2)]
    except (ClaimError, ZeroDivisionError):
        return None
    if any(v is None for v in f):
        return None
    b0, slope = f[0], f[1] - f[0]
    if slope == 0 or f[2] != b0 + 2 * slope:
        return None
    return (want - b0) / slope


def _holds_converted(converted, limits: ClaimLimits) -> bool:
    """`1 hour + 30 minutes = 90 minutes` is right with its units converted: no repair."""
    if converted is None:
        return False
    try:
        lhs, rhs = evaluate(converted.lhs, limits), evaluate(converted.rhs, limits)
    except (ClaimError, ZeroDivisionError):
        return True  # undecidable here: leave it alone
    return lhs is None or rhs is None or holds(lhs, converted.op, rhs)


def _value_span(text: str, span: tuple[int, int], value: Fraction) -> tuple[int, int] | None:
    """Where the claim's right-hand value is written: its last number literal of that value."""
    start, end = span
    # A claim's span may stop before the value's last digits or sign is part of the span.
    stop = end
    while stop < len(text) and (text[stop].isdigit() or text[stop] in ",."):
        if text[stop] in ",." and not (stop + 1 < len(text) and text[stop + 1].isdigit()):
            break
        stop += 1
    for m in reversed(list(_LITERAL.finditer(text, start, stop))):
        written = m.group().replace("−", "-").replace(",", "")
        try:
            if Fraction(written) == value:
                return m.start(), m.end()
            if Fraction(written) == -value and m.start() > 0 and text[m.start() - 1] in "-−":
                return m.start() - 1, m.end()
        except ValueError:
            continue
    return None


def _rounded_like(value: Fraction, old: str) -> str:
    """`value` rounded to two decimals, or to as many as `old` has if more (`10 / 3` ->
    `3.33`), with more places for a value that would round to zero (`1 / 300` -> `0.003`), up
    to six; thousands commas as `old` has them."""
    written = old.replace(",", "")
    places = max(2, len(written.rsplit(".", 1)[1]) if "." in written else 0)
    while True:
        scaled = round(abs(value) * 10**places)  # never a tie: the decimal does not end
        if scaled or places >= 6:
            break
        places += 1
    whole, frac = divmod(scaled, 10**places)
    sign = "-" if value < 0 and scaled else ""
    head = f"{whole:,}" if "," in old else str(whole)
    return f"{sign}{head}.{frac:0{places}d}"


def _written_like(value: Fraction, old: str) -> str | None:
    """`value` as a decimal in the style of `old` (thousands commas kept), None if it has no
    finite decimal of at most six places."""
    text = number_text(value)
    if "/" in text:
        return None
    if "," in old and "." not in text:
        sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
        text = sign + f"{int(digits):,}"
    return text
