"""Claims into Z3: terms, relations and divisor guards in a per-thread shared context."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from fractions import Fraction

import z3

from pipeline.verify.claim_ast import apply_op, check_exponent, power
from pipeline.verify.claims import ClaimLimits, Expr, Neg, Num, Pow, Relation, Var, evaluate


class _Undefined(Exception):
    """A claim divides by a constant zero."""


@dataclass(slots=True)
class _Build:
    """What translating a claim found besides its term: divisor guards, nonlinearity."""

    guards: list[z3.BoolRef] = field(default_factory=list)
    is_nonlinear: bool = False
    max_bits: int = 0  # the largest constant's numerator or denominator
    names: set[str] = field(default_factory=set)  # the variables used


_local = threading.local()


def _shared_context() -> z3.Context:
    """This thread's Z3 context, shared by its checkers. A context costs ~16 MB and a solver
    in it ~1 MB: with a context per checker, the LRU of checkers grew a verify process to
    4.5 GB. Z3 contexts are not thread-safe, hence one per thread (`check_step` serializes its
    cached checkers with a lock on top)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        ctx = _local.ctx = z3.Context()
    return ctx


_RELATE = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def to_z3(
    rels: list[Relation],
    ctx: z3.Context,
    names: dict[str, z3.ArithRef],
    limits: ClaimLimits,
    guarded: bool = True,
) -> tuple[z3.BoolRef, _Build]:
    """The conjunction of `rels` (with `d != 0` for each symbolic divisor d, unless `guarded`
    is False: the guards are then only in the build), and its traits; `names` holds the Z3
    variables made so far (one per claim variable, reused)."""
    build = _Build()
    term = _Terms(ctx, names, limits, build)
    parts = []
    for rel in rels:
        lhs = term.as_z3(term(rel.lhs))
        rhs = term.as_z3(term(rel.rhs))
        parts.append(_RELATE[rel.op](lhs, rhs))
    if guarded:
        parts[:0] = build.guards
    return (parts[0] if len(parts) == 1 else z3.And(parts)), build


class _Terms:
    """Claim AST -> Z3 terms in one context, constants folded exactly."""

    def __init__(
        self, ctx: z3.Context, names: dict[str, z3.ArithRef], limits: ClaimLimits, build: _Build
    ) -> None:
        self.ctx, self.names, self.limits, self.build = ctx, names, limits, build

    def as_z3(self, value: Fraction | z3.ArithRef) -> z3.ArithRef:
        if isinstance(value, Fraction):
            bits = max(value.numerator.bit_length(), value.denominator.bit_length())
            self.build.max_bits = max(self.build.max_bits, bits)
            return z3.RealVal(f"{value.numerator}/{value.denominator}", self.ctx)
        return value

    def __call__(self, expr: Expr) -> Fraction | z3.ArithRef:
        """A Fraction for a constant subtree (folded exactly), else a Z3 term."""
        if isinstance(expr, Num):
            return expr.value
        if isinstance(expr, Var):
            self.build.names.add(expr.name)
            if expr.name not in self.names:
                self.names[expr.name] = z3.Real(expr.name, self.ctx)
            return self.names[expr.name]
        if isinstance(expr, Neg):
            return -self(expr.operand)
        if isinstance(expr, Pow):
            exponent = check_exponent(evaluate(expr.exponent, self.limits), self.limits)
            base = self(expr.base)
            if isinstance(base, Fraction):
                return power(base, exponent, self.limits)
            if exponent == 0:  # x^0 = 1; Z3's `**` would leave 0^0 unspecified
                return Fraction(1)
            self.build.is_nonlinear |= exponent > 1
            result = base
            for _ in range(exponent - 1):
                result = result * base
            return result
        left, right = self(expr.left), self(expr.right)
        if isinstance(left, Fraction) and isinstance(right, Fraction):
            try:
                return apply_op(expr.op, left, right, self.limits)
            except ZeroDivisionError:
                raise _Undefined from None
        if expr.op == "/":
            if isinstance(right, Fraction):
                if right == 0:
                    raise _Undefined
            else:
                self.build.guards.append(right != 0)
                self.build.is_nonlinear = True
        elif expr.op == "*":
            self.build.is_nonlinear |= not isinstance(left, Fraction) and not isinstance(
                right, Fraction
            )
        left, right = self.as_z3(left), self.as_z3(right)
        if expr.op == "+":
            return left + right
        if expr.op == "-":
            return left - right
        if expr.op == "*":
            return left * right
        return left / right
