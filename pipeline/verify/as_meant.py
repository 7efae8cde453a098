"""Arithmetic false as written but right as meant: the ways people write a true computation
that a literal reading refutes. Each is `consistent` (never entailed, never contradicted); a
contradiction would roll back a right step.

* a rounded decimal: `10 / 3 = 3.33` (never `10 / 4 = 2.6`, exact at its precision and wrong);
* a running total: `$3/2 = $1.50 + $3.00 = $4.50`, `8*45 = 360 divided by 5 is 72` — the
  right side starts from the left side's value and goes on;
* a division with a remainder: `100 / 3 = 33, with 1 remaining`;
* a percent sign that labels a number: `100 - 5 = 95%`, `1260 / 3500 * 100 = 36%`,
  `$7500/75% = $100` (a missed division by 100 is then not caught: consistent, not wrong);
  not where the result is said in the left side's own unit (`1 cup x 100% = 100 cups`).
"""

from __future__ import annotations

import re
from fractions import Fraction

from pipeline.verify.claim_ast import (
    BinOp,
    ClaimError,
    ClaimLimits,
    Expr,
    Num,
    Relation,
    evaluate,
    literal_value,
)

_REMAINDER = re.compile(r"^[^.;!?\n]{0,40}\b(?:remain\w*|left\s*over|leftover|remainder)\b", re.I)


def as_meant(rel: Relation, after: str, limits: ClaimLimits) -> str:
    """Why `rel`, false as written, is right as meant ("" when it is not): `after` is the text
    that follows it in its step."""
    if rel.op != "=":
        return ""
    try:
        if _rounded(rel, limits):
            return "holds when rounded"
        if _running_total(rel, limits):
            return "a running total"
        if _remainder(rel, after, limits):
            return "a division with a remainder"
        if _percent_label(rel, limits) and not _counts_after(rel, after):
            return "the % labels a percentage"
    except (ClaimError, ZeroDivisionError):
        return ""
    return ""


def _running_total(rel: Relation, limits: ClaimLimits) -> bool:
    """A computation on the left; on the right, a number equal to its value (down the left
    operands) that the right side goes on from: `3/2 = 1.50 + 3.00`, not `10% of 2 = 20% of 2`
    (a percentage is not a number written as the result) nor `1.5 = 1.5 - 1.25`."""
    if not isinstance(rel.lhs, BinOp):
        return False
    whole = evaluate(rel.lhs, limits)
    part = rel.rhs
    while isinstance(part, BinOp):
        part = part.left
        if isinstance(part, Num) and part.value == whole:
            return True
    return False


def _remainder(rel: Relation, after: str, limits: ClaimLimits) -> bool:
    if not (isinstance(rel.lhs, BinOp) and rel.lhs.op == "/" and isinstance(rel.rhs, Num)):
        return False
    exact = evaluate(rel.lhs, limits)
    if exact is None or exact < 0 or not _REMAINDER.search(after):
        return False
    return rel.rhs.value == exact.numerator // exact.denominator


def _percent_label(rel: Relation, limits: ClaimLimits) -> bool:
    """`100 - 5 = 95%`: a lone percentage against a side without one, equal to its number;
    `3 / 21 * 100% = 14.28`: a side with a percentage against a lone number, equal (or
    rounded) to its value in percent."""
    for lone, other in ((rel.rhs, rel.lhs), (rel.lhs, rel.rhs)):
        if _is_percent(lone) and not _has_percent(other):
            value = evaluate(other, limits)
            return value is not None and value == lone.left.value  # type: ignore[union-attr]
    if isinstance(rel.rhs, Num) and _has_percent(rel.lhs):
        value = evaluate(rel.lhs, limits)
        if value is not None and _written_as(value * 100, rel.rhs.value, _places(rel)):
            return True
        # "$7500/75% = $100", "10/100%*$5 = $.50": the % labels a number used as it is
        plain = evaluate(_unlabelled(rel.lhs), limits)
        return plain is not None and plain == rel.rhs.value
    return False


_WORD = re.compile(r"[A-Za-z]+")


def _counts_after(rel: Relation, after: str) -> bool:
    """`1 cup x 100% = 100 cups`: the result is said in a unit the left side's quantity has,
    so it is that quantity, not a percentage."""
    m = re.match(r"\s*([A-Za-z]+)", after)
    if m is None:
        return False
    unit = m.group(1).lower()
    words = {w.lower() for w in _WORD.findall(rel.text)}
    return unit in words or (unit.endswith("s") and unit[:-1] in words)


def _unlabelled(expr: Expr) -> Expr:
    """`expr` with every percentage read as its number."""
    if _is_percent(expr):
        return expr.left  # type: ignore[union-attr]
    if isinstance(expr, BinOp):
        return BinOp(expr.op, _unlabelled(expr.left), _unlabelled(expr.right))
    return expr


def _places(rel: Relation) -> int:
    written = rel.text.rsplit("=", 1)[-1].strip().rstrip(".%").replace(",", "")
    return len(written.rsplit(".", 1)[-1]) if "." in written else 0


def _written_as(exact: Fraction, written: Fraction, places: int) -> bool:
    """`written` is `exact` as written to `places` decimals (rounded or cut)."""
    if exact == written:
        return True
    if places == 0 and exact.denominator == 1:
        return False
    scaled = abs(exact) * 10**places
    cut = scaled.numerator // scaled.denominator
    nearest = cut + (scaled - cut >= Fraction(1, 2))
    return abs(written) * 10**places in (cut, nearest) and (exact < 0) == (written < 0)


def _is_percent(expr: Expr) -> bool:
    return (
        isinstance(expr, BinOp) and expr.op == "/" and isinstance(expr.left, Num)
        and isinstance(expr.right, Num) and expr.right.value == 100
    )  # fmt: skip


def _has_percent(expr: Expr) -> bool:
    if _is_percent(expr):
        return True
    if isinstance(expr, BinOp):
        return _has_percent(expr.left) or _has_percent(expr.right)
    return False


def _rounded(rel: Relation, limits: ClaimLimits) -> bool:
    """`10 / 3 = 3.33`, `9 / 27 * 100% = 33.333%` (see `_rounded_number`)."""
    if _is_percent(rel.rhs) and not isinstance(rel.lhs, Num):
        exact = evaluate(rel.lhs, limits)
        written = rel.rhs.left.value  # type: ignore[union-attr]
        places = _places(rel)
        return exact is not None and places > 0 and _written_as(exact * 100, written, places)
    return _rounded_number(rel, limits)


def _rounded_number(rel: Relation, limits: ClaimLimits) -> bool:
    """`10 / 3 = 3.33`: a decimal written to k places that the exact value rounds (or cuts)
    to, where no k-place decimal is exact. Models write such steps meaning "about"; a
    contradiction would roll back a right step. Never true for an exactly representable
    value written wrong (`10 / 4 = 2.6` stays false)."""
    value = literal_value(rel.rhs)
    if rel.op != "=" or value is None or "." not in rel.text.rsplit("=", 1)[-1]:
        return False
    written = rel.text.rsplit("=", 1)[-1].strip().rstrip(".")
    places = len(written.rsplit(".", 1)[-1]) if "." in written else 0
    if places == 0 or not written.replace(".", "", 1).replace(",", "").lstrip("-").isdigit():
        return False
    exact = evaluate(rel.lhs, limits)
    if exact is None:
        return False
    scaled = exact * 10**places
    if scaled.denominator == 1:  # representable at that precision: no excuse
        return False
    magnitude = abs(scaled)
    cut = magnitude.numerator // magnitude.denominator  # truncated (2/3 = 0.66)
    nearest = cut + (magnitude - cut >= Fraction(1, 2))  # rounded half up (2/3 = 0.67)
    written_scaled = abs(value * 10**places)
    same_sign = (exact < 0) == (value < 0) or written_scaled == 0
    return same_sign and written_scaled in (cut, nearest)
