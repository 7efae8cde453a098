"""Repairs: a stated arithmetic value its own claim refutes, and the value it should have had.

Verify mode `repair` (docs/verification.md) is a calculator in the loop, as GSM8K's own
solutions were written with one: decode reads each claim the moment its value is written and
closed (`88 * 40 = 3120` followed by a word, a comma, a sentence's end, `$`, `\\)`, `>>`), and
when the claim has no unknowns and its left side computes another value, the wrong value is
replaced by the right one (`3120` -> `3520`) and the model goes on from there. Only what this
module can compute exactly is repaired; everything else (unknowns, contradictions with earlier
steps, relations) is left to the checker's verdict and its rollback.

Pure logic: no engine, no tokens. `find_repair` reads text; decode maps its span to tokens.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from fractions import Fraction

from pipeline.verify.as_meant import as_meant
from pipeline.verify.claim_ast import (
    DEFAULT_LIMITS,
    ClaimError,
    ClaimLimits,
    Expr,
    Neg,
    Num,
    evaluate,
    expr_variables,
    holds,
)
from pipeline.verify.prose import FoundClaim, find_claims
from pipeline.verify.verdicts import number_text

# A number as written: optional sign, digits with thousands commas, decimals.
_LITERAL = re.compile(r"[-−]?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|[-−]?\.\d+")
# What may follow a value and still continue its expression: spaces then an operator, a digit,
# a parenthesis, `%`, or a LaTeX operator. Anything else after it closes the value.
_CONTINUES = re.compile(r"[ \t]*(?:[-+*/×÷^(%\d−]|\\(?:times|cdot|div|frac|left|,)|\.\d)")
# A value is only known closed once something other than spaces follows it; a `.` only with
# a space, a line end or markup after it (`3.` may still become `3.5`).
_OPEN_END = re.compile(r"[ \t]*\.?$")


@dataclass(frozen=True, slots=True)
class Repair:
    """Replace text[span] (`old`) by `new`: the value `claim` computes."""

    span: tuple[int, int]
    old: str
    new: str
    claim: str  # the claim as written, with its wrong value


def closed_at(text: str, end: int) -> bool:
    """Has the value ending at `end` been closed by what follows it (so it cannot grow)?"""
    rest = text[end:]
    if _OPEN_END.fullmatch(rest):
        return False
    return _CONTINUES.match(rest) is None


def false_claims(
    text: str, limits: ClaimLimits = DEFAULT_LIMITS
) -> Iterator[tuple[FoundClaim, Fraction, Fraction]]:
    """The claims of `text` with no unknowns that are false whatever the state: (claim, its
    left side's value, its right side's), in order. Rounded values as meant, claims right with
    their units converted and alternatives are not false."""
    for claim in find_claims(text, limits):
        rel = claim.relation
        if rel is None or claim.alternative:
            continue
        if expr_variables(rel.lhs) or expr_variables(rel.rhs):
            continue
        try:
            lhs, rhs = evaluate(rel.lhs, limits), evaluate(rel.rhs, limits)
        except (ClaimError, ZeroDivisionError):
            continue
        if lhs is None or rhs is None or holds(lhs, rel.op, rhs):
            continue
        if _holds_converted(claim.converted, limits):
            continue
        if as_meant(rel, text[claim.span[1] : claim.span[1] + 80], limits):  # "10 / 3 = 3.33"
            continue
        yield claim, lhs, rhs


def find_repair(
    text: str, *, final: bool = False, limits: ClaimLimits = DEFAULT_LIMITS
) -> Repair | None:
    """The first wrong value in `text` a repair can put right: a claim `lhs = value` with no
    unknowns whose `lhs` computes exactly to another value written as a decimal. With `final`
    false (the text is still being written) only values that are closed count."""
    for claim, want, got in false_claims(text, limits):
        rel = claim.relation
        assert rel is not None
        if rel.op != "=" or not _literal(rel.rhs):
            continue
        span = _value_span(text, claim.span, got)
        if span is None or not (final or closed_at(text, span[1])):
            continue
        new = _written_like(want, text[span[0] : span[1]])
        if new is None:
            return None  # the right value has no finite decimal: the checker's verdict decides
        start, end = claim.span
        return Repair(span, text[span[0] : span[1]], new, text[start:end])
    return None


def closed_false_claim(
    text: str, *, final: bool = False, limits: ClaimLimits = DEFAULT_LIMITS
) -> FoundClaim | None:
    """The first claim of `text` with no unknowns that is false and written to its end (its
    value closed, or `final`): what decode rolls back the moment it is written. Claims come in
    text order, so a false claim still open is the text's last."""
    for claim, _, got in false_claims(text, limits):
        span = _value_span(text, claim.span, got)
        if final or closed_at(text, claim.span[1] if span is None else span[1]):
            return claim
    return None


def _literal(expr: Expr) -> bool:
    return isinstance(expr, Num) or (isinstance(expr, Neg) and isinstance(expr.operand, Num))


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
