"""Linear equations solved exactly: the checker's state while it is only such equations.

Most jobs' state S is a few linear equations (`x = (3 + 8 + 9) / 4`, the question premise of an
arithmetic job; `2x + 3 = 11`; `x + y = 10, x - y = 2`). Kept in reduced row echelon form over
the rationals, they say at once whether S is consistent and which variables it fixes, so a claim
whose variables are all fixed is true or false by exact arithmetic, the verdict Z3 would give,
without building a term (state_solver.py hands S to Z3 when a relation of another shape comes).
"""

from __future__ import annotations

from fractions import Fraction

from pipeline.verify.claim_ast import BinOp, Expr, Neg, Num, Pow, expr_variables, substitute
from pipeline.verify.claims import ClaimError, ClaimLimits, Relation, evaluate

MAX_VARIABLES = 8  # a larger system goes to Z3: elimination here is for the few a job names

_Row = dict[str, Fraction]  # variable -> coefficient; the key "" holds the constant (= 0 form)


class LinearSystem:
    """Linear equations over the rationals, in reduced row echelon form."""

    def __init__(self, limits: ClaimLimits) -> None:
        self.limits = limits
        self.rows: list[tuple[str, _Row]] = []  # (pivot, row): the pivot in no other row
        self.consistent = True
        self.values: dict[str, Fraction] = {}  # the variables the equations fix

    def add(self, rel: Relation) -> bool:
        """Add `rel` if it is a linear equation (True); else leave the system as it is."""
        row = self.row_of(rel)
        if row is None:
            return False
        for pivot, held in self.rows:  # eliminate the pivots already held
            if pivot in row:
                _add_scaled(row, held, -row[pivot])
        variables = [v for v in row if v]
        if not variables:  # 0 = 0, or 0 = c: S cannot hold
            self.consistent &= not row.get("")
            return True
        pivot = min(variables)
        scale = row[pivot]
        row = {v: c / scale for v, c in row.items()}
        for _, held in self.rows:  # and this pivot from the rows held
            if pivot in held:
                _add_scaled(held, row, -held[pivot])
        self.rows.append((pivot, row))
        self.values = {p: -r.get("", Fraction(0)) for p, r in self.rows if len(r) - ("" in r) == 1}
        return True

    def row_of(self, rel: Relation) -> _Row | None:
        """`lhs - rhs` as coefficients, when `rel` is an equation linear in its variables."""
        names = sorted(expr_variables(rel.lhs) | expr_variables(rel.rhs))
        if rel.op != "=" or not names or len(names) > MAX_VARIABLES:
            return None
        if not (_linear(rel.lhs) and _linear(rel.rhs)):
            return None
        diff = BinOp("-", rel.lhs, rel.rhs)
        zero = {name: Num(Fraction(0)) for name in names}
        try:
            constant = evaluate(substitute(diff, zero), self.limits)
            if constant is None:
                return None
            row: _Row = {}
            for name in names:
                at_one = evaluate(substitute(diff, {**zero, name: Num(Fraction(1))}), self.limits)
                if at_one is None:
                    return None
                if at_one != constant:
                    row[name] = at_one - constant
        except (ClaimError, ZeroDivisionError):
            return None
        if constant:
            row[""] = constant
        return row


def _add_scaled(row: _Row, other: _Row, factor: Fraction) -> None:
    """row += factor * other, dropping zero coefficients."""
    for v, c in other.items():
        new = row.get(v, Fraction(0)) + factor * c
        if new:
            row[v] = new
        else:
            row.pop(v, None)


def _linear(expr: Expr) -> bool:
    """No product of two terms with variables, no variable in a divisor or a power."""
    if isinstance(expr, Neg):
        return _linear(expr.operand)
    if isinstance(expr, Pow):
        return not expr_variables(expr)
    if isinstance(expr, BinOp):
        if expr.op == "/" and expr_variables(expr.right):
            return False
        if expr.op == "*" and expr_variables(expr.left) and expr_variables(expr.right):
            return False
        return _linear(expr.left) and _linear(expr.right)
    return True
