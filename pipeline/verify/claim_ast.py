"""The claim AST, its hard limits, and exact arithmetic over it.

Constants are evaluated with `Fraction` under `ClaimLimits`, so `9^9^9^9` or a 10,000-digit
number is refused (ClaimError "limit") before any big arithmetic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction


@dataclass(frozen=True, slots=True)
class ClaimLimits:
    """Bounds on what a step may ask the verifier to read or compute."""

    max_step_chars: int = 16000  # a whole step (an R1-style paragraph can be long)
    max_line_chars: int = 1000
    max_digits: int = 30  # per number literal
    max_paren_depth: int = 32
    max_tokens: int = 200  # per relation chain; bounds the AST depth (recursion) too
    max_vars: int = 8  # distinct variables per step
    max_claims: int = 32  # per step (the rest of a longer step is unknown: limit)
    max_exponent: int = 12
    max_degree: int = 12  # of a claim's polynomial; Z3 cancels slowly past it
    max_nonlinear_bits: int = 64  # per constant, when the checker's query is nonlinear
    max_value_bits: int = 4096  # numerator and denominator of every intermediate value
    max_premises: int = 32  # relations taken from a problem statement

    def __post_init__(self) -> None:
        for name in self.__slots__:
            if getattr(self, name) < 0:
                raise ValueError(f"ClaimLimits.{name} must be >= 0")


DEFAULT_LIMITS = ClaimLimits()


class ClaimError(ValueError):
    """A step the verifier will not read: `reason` is "limit" or "unparseable"."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# ---- AST -------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Num:
    value: Fraction

    def __str__(self) -> str:
        v = self.value
        return str(v.numerator) if v.denominator == 1 else f"({v.numerator}/{v.denominator})"


@dataclass(frozen=True, slots=True)
class Var:
    name: str

    def __str__(self) -> str:
        return self.name


@dataclass(frozen=True, slots=True)
class Neg:
    operand: Expr

    def __str__(self) -> str:
        return f"-({self.operand})"


@dataclass(frozen=True, slots=True)
class BinOp:
    op: str  # one of + - * /
    left: Expr
    right: Expr

    def __str__(self) -> str:
        return f"({self.left} {self.op} {self.right})"


@dataclass(frozen=True, slots=True)
class Pow:
    base: Expr
    exponent: Expr

    def __str__(self) -> str:
        return f"({self.base})^({self.exponent})"


Expr = Num | Var | Neg | BinOp | Pow

RELATION_OPS = ("=", "!=", "<", "<=", ">", ">=", "≈")
# `≈` holds for a rounding at the written value's precision (`1/12 ≈ 0.083`, `3/2 ≈ 2`), or
# an estimate within a fifth (`987 ≈ 1000`); `1/12 ≈ 0.0595` is false. Only claims without
# unknowns are read with it (prose.py).
APPROX_TOLERANCE = Fraction(1, 5)


@dataclass(frozen=True, slots=True)
class Relation:
    """One claim `lhs op rhs`; `op` is canonical (RELATION_OPS), `text` is the source pair."""

    lhs: Expr
    op: str
    rhs: Expr
    text: str


# ---- exact arithmetic under limits -----------------------------------------------------------


def _bounded(value: Fraction, limits: ClaimLimits) -> Fraction:
    bits = limits.max_value_bits
    if value.numerator.bit_length() > bits or value.denominator.bit_length() > bits:
        raise ClaimError("limit", "number too large")
    return value


def apply_op(op: str, a: Fraction, b: Fraction, limits: ClaimLimits = DEFAULT_LIMITS) -> Fraction:
    """`a op b` exactly; ClaimError("limit") when too big, ZeroDivisionError for `/ 0`."""
    if op == "+":
        return _bounded(a + b, limits)
    if op == "-":
        return _bounded(a - b, limits)
    if op == "*":
        return _bounded(a * b, limits)
    if op == "/":
        if b == 0:
            raise ZeroDivisionError("division by zero")
        return _bounded(a / b, limits)
    raise ValueError(f"unknown operator {op!r}")


def check_exponent(exponent: Fraction | None, limits: ClaimLimits = DEFAULT_LIMITS) -> int:
    """The exponent as an int; only constant integers 0..max_exponent are allowed."""
    if exponent is None or exponent.denominator != 1:
        raise ClaimError("limit", "exponent must be a constant integer")
    if not 0 <= exponent <= limits.max_exponent:
        raise ClaimError("limit", f"exponent must be in 0..{limits.max_exponent}")
    return int(exponent)


def power(base: Fraction, exponent: int, limits: ClaimLimits = DEFAULT_LIMITS) -> Fraction:
    # Size check before computing: the result has about bits(base) * exponent bits.
    bits = max(base.numerator.bit_length(), base.denominator.bit_length())
    if bits * exponent > limits.max_value_bits:
        raise ClaimError("limit", "power too large")
    return base**exponent


def literal_value(expr: Expr) -> Fraction | None:
    """The value of a number as written, a negative one included (`-0.33` reads as Neg);
    None for anything else."""
    if isinstance(expr, Num):
        return expr.value
    if isinstance(expr, Neg) and isinstance(expr.operand, Num):
        return -expr.operand.value
    return None


def evaluate(expr: Expr, limits: ClaimLimits = DEFAULT_LIMITS) -> Fraction | None:
    """The exact value of `expr`, None when it has a variable.

    Raises ClaimError("limit") for values or exponents over the limits (before computing them)
    and ZeroDivisionError for a division by zero.
    """
    if isinstance(expr, Num):
        return expr.value
    if isinstance(expr, Var):
        return None
    if isinstance(expr, Neg):
        value = evaluate(expr.operand, limits)
        return None if value is None else -value
    if isinstance(expr, Pow):
        exponent = check_exponent(evaluate(expr.exponent, limits), limits)
        base = evaluate(expr.base, limits)
        return None if base is None else power(base, exponent, limits)
    left, right = evaluate(expr.left, limits), evaluate(expr.right, limits)
    if left is None or right is None:
        return None
    return apply_op(expr.op, left, right, limits)


def degree(expr: Expr, limits: ClaimLimits = DEFAULT_LIMITS) -> int:
    """An upper bound on the polynomial degree of `expr` (a divisor's degree counts too)."""
    if isinstance(expr, Num):
        return 0
    if isinstance(expr, Var):
        return 1
    if isinstance(expr, Neg):
        return degree(expr.operand, limits)
    if isinstance(expr, Pow):
        return degree(expr.base, limits) * check_exponent(evaluate(expr.exponent, limits), limits)
    left, right = degree(expr.left, limits), degree(expr.right, limits)
    return max(left, right) if expr.op in "+-" else left + right


def holds(lhs: Fraction, op: str, rhs: Fraction) -> bool:
    if op == "=":
        return lhs == rhs
    if op == "≈":
        return near(lhs, rhs)
    if op == "!=":
        return lhs != rhs
    if op == "<":
        return lhs < rhs
    if op == "<=":
        return lhs <= rhs
    if op == ">":
        return lhs > rhs
    return lhs >= rhs


def near(exact: Fraction, written: Fraction) -> bool:
    """`exact ≈ written`: within one unit of the written value's last decimal place, or
    within APPROX_TOLERANCE of it (see RELATION_OPS)."""
    places = 0
    while (written * 10**places).denominator != 1 and places < 12:
        places += 1
    error = abs(exact - written)
    return error < Fraction(1, 10**places) or error <= APPROX_TOLERANCE * abs(written)


def expr_variables(expr: Expr) -> set[str]:
    if isinstance(expr, Var):
        return {expr.name}
    if isinstance(expr, Num):
        return set()
    if isinstance(expr, Neg):
        return expr_variables(expr.operand)
    if isinstance(expr, Pow):
        return expr_variables(expr.base) | expr_variables(expr.exponent)
    return expr_variables(expr.left) | expr_variables(expr.right)


def at_values(rel: Relation, values: Mapping[str, Fraction]) -> Relation | None:
    """`rel` with each of its variables replaced by its value; None when `values` lacks one."""
    names = expr_variables(rel.lhs) | expr_variables(rel.rhs)
    if not names <= values.keys():
        return None
    fixed: dict[str, Expr] = {name: Num(values[name]) for name in names}
    return Relation(substitute(rel.lhs, fixed), rel.op, substitute(rel.rhs, fixed), rel.text)


def substitute(expr: Expr, values: Mapping[str, Expr]) -> Expr:
    """`expr` with each variable named in `values` replaced by its expression."""
    if isinstance(expr, Var):
        return values.get(expr.name, expr)
    if isinstance(expr, Neg):
        return Neg(substitute(expr.operand, values))
    if isinstance(expr, Pow):
        return Pow(substitute(expr.base, values), substitute(expr.exponent, values))
    if isinstance(expr, BinOp):
        return BinOp(expr.op, substitute(expr.left, values), substitute(expr.right, values))
    return expr


def variables(relations: Iterable[Relation]) -> set[str]:
    """The variable names used by `relations`."""
    names: set[str] = set()
    for rel in relations:
        names |= expr_variables(rel.lhs) | expr_variables(rel.rhs)
    return names
