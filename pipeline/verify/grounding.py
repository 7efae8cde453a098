"""Numbers grounded in what was said before: a claim that computes with a number found nowhere
in the problem, the job's premises, the earlier steps or the claims before it in its step is
`ungrounded` — `2 bolts of blue fiber are 2 * 8 = 16 bolts` when no 8 was ever given.

What counts as given: every number the problem, the premises and the accepted steps state
(quantities.py: digits, `3/4`, `20%`, number words, `half`, `dozen`), the results of the
step's earlier claims, the numbers of everyday conversions (`7` days a week, `60` minutes,
`12` months, `100` percent...), and what a percentage or a fraction says without writing it
(`0.2` after "20%", `60` after "40% are boys", `1.5` after "50% more"). Only the operands of
an arithmetic claim are asked about, never its result (a result is what the claim computes),
nor the numbers of an equation (solving one rewrites them).

An ungrounded claim is a flag, not a contradiction: reported with its verdict, never a
backtrack (decode acts on `contradicted` only). A solution may bring a number in for a
reason the checker cannot see.
"""

from __future__ import annotations

from collections.abc import Iterable
from fractions import Fraction

from pipeline.verify.claim_ast import (
    BinOp,
    Expr,
    Neg,
    Num,
    Pow,
    Relation,
    expr_variables,
    variables,
)
from pipeline.verify.found_claim import FoundClaim
from pipeline.verify.quantities import quantities

# The numbers of everyday conversions and counting: never ungrounded.
CONSTANTS = frozenset(
    Fraction(n) for n in (0, 1, 2, 7, 10, 12, 24, 30, 52, 60, 100, 365, 1000, 3600)
)


class Grounding:
    """The numbers a job has stated so far, and which of a step's operands are new."""

    def __init__(self, problem: str = "", premises: Iterable[str] = ()) -> None:
        self.stated: set[Fraction] = set()  # what the texts say (the constants apart)
        self.add(problem)
        # Without a problem that gives numbers (a bare "check this" job, premises alone)
        # there is nothing to ground in: every number would be ungrounded.
        self.active = bool(self.stated)
        for text in premises:
            self.add(text)

    def add(self, text: str) -> None:
        """Everything `text` states counts as given from now on."""
        for q in quantities(text):
            self.stated.update(q.values)

    def ungrounded(self, step: str, found: tuple[FoundClaim, ...]) -> dict[int, Fraction]:
        """Claim index -> its first operand that is not grounded, for the stated claims of
        `step` (alternatives and unreadable claims are not asked about)."""
        if not self.active or not found:
            return {}
        allowed = set(self.stated)
        spans = [c.span for c in found]
        for q in quantities(step):
            in_words = not step[q.span[0]].isdigit()  # "a fifth of 210", "half", "dozen"
            if in_words or not any(s <= q.span[0] < e for s, e in spans):
                allowed.update(q.values)  # stated in the step's words: "split between 3 types"
        out: dict[int, Fraction] = {}
        chain_end = -1
        for i, claim in enumerate(found):
            rel = claim.relation
            continues = claim.span[0] < chain_end  # `a + b = c + d = e`: later sides worked out
            chain_end = claim.span[1]
            if rel is None:
                continue
            operands, results = _operands(rel)
            if continues:
                operands, results = [], operands + results
            if not claim.alternative and not variables([rel]):
                stray = next((n for n in operands if not self._grounded(n, allowed)), None)
                if stray is not None:
                    out[i] = stray
            allowed.update(results)
            allowed.update(operands)  # said once in the step, it may be used again
        return out

    def _grounded(self, n: Fraction, allowed: set[Fraction]) -> bool:
        """A constant; given; or a given number's percentage, fraction or complement: `0.2`
        after "20%" or "twenty cents", `1.5` after "50% more", `1.04` after "4% interest",
        `60` after "40% are boys" (never a constant's: 93 is not 100 - 7)."""
        if n in CONSTANTS or n in allowed or -n in allowed:
            return True
        return any(
            m in allowed
            for m in (
                n * 100,
                n / 100,
                1 - n,
                n - 1,
                100 - n,
                n * 1000,
                n / 1000,
                n * 100 - 100,
                100 - n * 100,
            )  # fmt: skip
        )


def _operands(rel: Relation) -> tuple[list[Fraction], list[Fraction]]:
    """(the numbers a claim computes with, the numbers it computes): in `16 - 3 - 4 = 9` the
    9 is a result, in `2/3 × 9/2 = 18/6` the 18 and 6 are worked out, in `36 = 4 × 9` the 4
    and 9 are given; in `x = 20` the 20 is a result (a solution); in `54 - x = 34` both are
    given."""
    lhs, rhs = _nums(rel.lhs), _nums(rel.rhs)
    has_vars = bool(expr_variables(rel.lhs) or expr_variables(rel.rhs))
    if rel.op != "=":
        return lhs + rhs, []
    if not has_vars:
        return (rhs, lhs) if _lone(rel.lhs) and not _lone(rel.rhs) else (lhs, rhs)
    if _is_var(rel.lhs) and _lone(rel.rhs):
        return lhs, rhs
    if _is_var(rel.rhs) and _lone(rel.lhs):
        return rhs, lhs
    return lhs + rhs, []


def _lone(expr: Expr) -> bool:
    """One number: `9`, `25%`, `-3`."""
    if isinstance(expr, Neg):
        return _lone(expr.operand)
    if isinstance(expr, BinOp):
        return expr.op == "/" and isinstance(expr.left, Num) and _is_hundred(expr.right)
    return isinstance(expr, Num)


def _is_hundred(expr: Expr) -> bool:
    return isinstance(expr, Num) and expr.value == 100


def _is_var(expr: Expr) -> bool:
    return not isinstance(expr, (Num, BinOp, Neg, Pow))


def _nums(expr: Expr) -> list[Fraction]:
    if isinstance(expr, Num):
        return [expr.value]
    if isinstance(expr, Neg):
        return _nums(expr.operand)
    if isinstance(expr, Pow):
        return _nums(expr.base)  # an exponent is a count, not a quantity
    if isinstance(expr, BinOp):
        if expr.op == "/" and _is_hundred(expr.right):
            return _nums(expr.left)  # "20%": the percentage, not its 100
        return _nums(expr.left) + _nums(expr.right)
    return []
