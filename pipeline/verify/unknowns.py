"""How a claim with unknowns is meant, so it is checked the way it was said.

* identity — a rewrite of an expression (`(5/8)*(7/10)*x = (35/40)*x`, `2x + 3x = 5x`): it must
  hold for every value of its unknowns, whatever is known. Both sides have the same unknowns
  and neither has a constant term: `(5/8)*(7/10)*x = (35/40)*x` is false, it holds only for
  x = 0, which is not what it says. (Words like "simplify" or "expand" are no sign: `Expand:
  5x - 10 = 3x + 4` is an equation whose sides were expanded. A false rewrite with a constant
  term, `2(x + 3) = 2x + 5`, has no solution as an equation, so it is refuted all the same.)
* solution — one unknown given a value (`x = 20`) when the constraints in force say something
  about it: it must follow from them.
* equation — any other claim with unknowns (`54 - x = 34`, `9 = (3/4)*number of novels`): a
  constraint set up from the problem or a step; refuted only when it cannot hold with what is
  known.
* arithmetic — no unknowns: exact rationals.

Identities are refuted by exact evaluation at a few points (one point where the sides differ
is a proof) and proved by Z3 (state_solver.holds_for_all).
"""

from __future__ import annotations

from fractions import Fraction

from pipeline.verify.claim_ast import (
    DEFAULT_LIMITS,
    ClaimError,
    ClaimLimits,
    Expr,
    Num,
    Relation,
    Var,
    evaluate,
    expr_variables,
    substitute,
)

ARITHMETIC, IDENTITY, EQUATION, SOLUTION = "arithmetic", "identity", "equation", "solution"
KINDS = (ARITHMETIC, IDENTITY, EQUATION, SOLUTION)

# Points where an identity's sides are compared (each unknown its own, none a common root).
_POINTS = (Fraction(7, 3), Fraction(-5, 2), Fraction(11, 7), Fraction(13, 5), Fraction(-3, 11))


def claim_kind(rel: Relation, constrained: set[str]) -> str:
    """The kind of `rel` (see the module docstring); `constrained`: the unknowns the
    constraints in force (and the step so far) speak of."""
    left, right = expr_variables(rel.lhs), expr_variables(rel.rhs)
    if not left and not right:
        return ARITHMETIC
    if rel.op == "=" and _lone_value(rel):
        (name,) = left | right
        return SOLUTION if name in constrained else EQUATION
    if rel.op == "=" and left == right and _homogeneous(rel):
        return IDENTITY
    return EQUATION


def _lone_value(rel: Relation) -> bool:
    """`x = 20`, `20 = x`: an unknown alone on one side, no unknown on the other."""
    return (isinstance(rel.lhs, Var) and not expr_variables(rel.rhs)) or (
        isinstance(rel.rhs, Var) and not expr_variables(rel.lhs)
    )


def _homogeneous(rel: Relation) -> bool:
    """Neither side has a constant term: both are 0 when every unknown is 0 (a side that is
    undefined there does not count as homogeneous)."""
    zero = dict.fromkeys(expr_variables(rel.lhs) | expr_variables(rel.rhs), Fraction(0))
    try:
        return at(rel.lhs, zero) == 0 and at(rel.rhs, zero) == 0
    except (ClaimError, ZeroDivisionError):
        return False


def counterexample(rel: Relation, limits: ClaimLimits) -> dict[str, Fraction] | None:
    """Values of the unknowns at which `rel`'s sides are both defined and differ; None when
    the points tried found none (then Z3 decides)."""
    names = sorted(expr_variables(rel.lhs) | expr_variables(rel.rhs))
    for k in range(len(_POINTS)):
        values = {n: _POINTS[(k + i) % len(_POINTS)] for i, n in enumerate(names)}
        try:
            lhs, rhs = at(rel.lhs, values, limits), at(rel.rhs, values, limits)
        except (ClaimError, ZeroDivisionError):
            continue
        if lhs != rhs:
            return values
    return None


def nearly(rel: Relation, values: dict[str, Fraction], limits: ClaimLimits) -> bool:
    """The sides differ by under 2% at `values`: a coefficient written rounded
    (`(1/3)x = 0.33x`), not a false rewrite."""
    try:
        lhs, rhs = at(rel.lhs, values, limits), at(rel.rhs, values, limits)
    except (ClaimError, ZeroDivisionError):
        return False
    return abs(lhs - rhs) * 50 < max(abs(lhs), abs(rhs))


def at(expr: Expr, values: dict[str, Fraction], limits: ClaimLimits | None = None) -> Fraction:
    """The exact value of `expr` with its unknowns set to `values`."""
    nums: dict[str, Expr] = {name: Num(v) for name, v in values.items()}
    value = evaluate(substitute(expr, nums), limits or DEFAULT_LIMITS)
    if value is None:  # cannot happen: every unknown has a value
        raise ClaimError("unparseable", "unknown left after substitution")
    return value


def describe(values: dict[str, Fraction]) -> str:
    """`x = 7/3, y = -5/2`."""
    return ", ".join(f"{n} = {v}" for n, v in sorted(values.items()))
