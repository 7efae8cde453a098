"""One relation's sides, from the claim finder's tokens to Exprs: the whole chain in one parse
when it is clean arithmetic, else side by side (an unreadable side gives its reason);
named quantities (prose_names.py) renamed from their placeholder letters to their words; and
the reading with units converted (prose_units.py)."""

from __future__ import annotations

from pipeline.verify.claim_ast import Expr, Relation, Var, substitute
from pipeline.verify.claims import ClaimError, ClaimLimits, parse_expr, parse_sides
from pipeline.verify.found_claim import LIMIT, UNSUPPORTED
from pipeline.verify.prose_tokens import APPROX, LP, NONARITH, NUM, RP, UNSUP, Token
from pipeline.verify.prose_units import converted_texts


def is_conversion(left: list[Token], right: list[Token]) -> bool:
    """A left side that is one number with its unit ("4.2 GB = ..."), against a right side in
    another unit or none. (A unit after the right side only ends the sentence: "= 1600 m".)"""

    def unit(side: list[Token]) -> str:
        return side[0].unit if len(side) == 1 and side[0].kind == NUM else ""

    return bool(unit(left)) and unit(left) != unit(right)


def trim_open(side: list[Token]) -> list[Token]:
    """Unbalanced "(" at the start of a first side: prose's "(so 3 + 4 = 7)"."""
    while side and side[0].kind == LP and _depth(side) > 0:
        side = side[1:]
    return side


def trim_close(side: list[Token]) -> list[Token]:
    while side and side[-1].kind == RP and _depth(side) < 0:
        side = side[:-1]
    return side


def _depth(side: list[Token]) -> int:
    return sum(t.math.count("(") - t.math.count(")") for t in side if t.kind in (LP, RP, "op"))


def read_chain(sides: list[list[Token]], ops: list[Token], limits: ClaimLimits) -> list | None:
    """Every side at once, in one parse of the whole chain: the common case (a clean chain of
    arithmetic) costs one grammar run instead of one per side. None: read side by side."""
    if not all(sides) or any(op.kind == APPROX for op in ops):
        return None
    if any(t.kind in (NONARITH, UNSUP) for side in sides for t in side):
        return None
    if sum(len(side) for side in sides) > limits.max_tokens:
        return None
    pieces = [" ".join(t.math for t in sides[0])]
    for op, side in zip(ops, sides[1:], strict=True):
        pieces.append(f"{op.math} {' '.join(t.math for t in side)}")
    try:
        return parse_sides(" ".join(pieces), limits)
    except ClaimError:
        return None


def read_side(side: list[Token], limits: ClaimLimits):
    """An Expr; NONARITH; or (reason, detail) for a side that cannot be read."""
    if not side:
        return None
    if any(t.kind == NONARITH for t in side):
        return NONARITH
    unsup = next((t for t in side if t.kind == UNSUP), None)
    if unsup is not None:
        if unsup.math == "limit":
            return (LIMIT, f"number with more than {limits.max_digits} digits")
        return (UNSUPPORTED, f"{unsup.math!r} is not evaluated")
    if len(side) > limits.max_tokens:
        return (LIMIT, f"more than {limits.max_tokens} tokens")
    try:
        return parse_expr(" ".join(t.math for t in side), limits)
    except ClaimError as e:
        return (e.reason, str(e)[:120])


def names_of(side: list[Token]) -> dict[str, str]:
    """Placeholder letter -> a named quantity's words, for the named VARs of `side`."""
    return {t.math: t.name for t in side if t.name}


def renamed(expr: Expr, names: dict[str, str]) -> Expr:
    """`expr` with each placeholder variable named by its words."""
    return substitute(expr, {letter: Var(name) for letter, name in names.items()})


def converted_relation(
    left: list[Token], op: str, right: list[Token], text: str, limits: ClaimLimits
) -> Relation | None:
    """The relation read with every quantity in its dimension's base unit, when its units
    mix scales (`1 hour + 30 minutes = 90 minutes`); None when there is nothing to convert."""
    texts = converted_texts([left, right])
    if texts is None or any(t.name for t in left + right):
        return None
    try:
        lhs, rhs = parse_sides(f"{texts[0]} {op} {texts[1]}", limits)
    except ClaimError:
        return None
    return Relation(lhs, op, rhs, text)
