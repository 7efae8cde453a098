"""Claims in a reasoning step: a whitelist lark grammar, exact rationals, hard limits.

A claim is one relation `lhs op rhs` between two expressions; a chain `a = b = c` gives one
claim per adjacent pair. Nothing is ever `eval`-ed: text is parsed by an LALR grammar into a
small typed AST, and constants are evaluated with `Fraction` under `ClaimLimits`, so
`9^9^9^9` or a 10,000-digit number is refused (ClaimError "limit") before any big arithmetic.
Digits are ASCII `[0-9]` only: look-alikes (`３`, `٣`, `³`) are not numbers.
"""

from __future__ import annotations

import contextlib
import functools
import re
from collections.abc import Iterable
from dataclasses import dataclass
from fractions import Fraction

from lark import Lark, Transformer, v_args
from lark.exceptions import LarkError, VisitError


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

RELATION_OPS = ("=", "!=", "<", "<=", ">", ">=")


@dataclass(frozen=True, slots=True)
class Relation:
    """One claim `lhs op rhs`; `op` is canonical (RELATION_OPS), `text` is the source pair."""

    lhs: Expr
    op: str
    rhs: Expr
    text: str


# ---- grammar ---------------------------------------------------------------------------------

# `i*` rules are the factors that may follow another factor without `*` (implicit
# multiplication): a variable or a parenthesis, never a bare number (`2 3` is not `6`).
_GRAMMAR = r"""
start: sum (REL sum)+

?sum: product
    | sum "+" product            -> add
    | sum ("-" | "−") product    -> sub
?product: unary
    | product ("*" | "×") unary  -> mul
    | product ("/" | "÷") unary  -> div
    | product ipower             -> mul
?unary: power
    | ("-" | "−") unary          -> neg
    | "+" unary
?power: postfix
    | postfix ("^" | "**") unary -> pow
?postfix: atom
    | atom "%"                   -> percent
?atom: NUMBER                    -> number
    | VAR                        -> var
    | "(" sum ")"
?ipower: ipostfix
    | ipostfix ("^" | "**") unary -> pow
?ipostfix: iatom
    | iatom "%"                  -> percent
?iatom: VAR                      -> var
    | "(" sum ")"

REL: "<=" | ">=" | "!=" | "=" | "<" | ">" | "≤" | "≥" | "≠"
NUMBER: /[0-9]+(\.[0-9]+)?|\.[0-9]+/
VAR: /(?<![A-Za-z])[A-Za-z](?![A-Za-z])/
%ignore /[ \t]+/
"""

_CANONICAL_OP = {"≤": "<=", "≥": ">=", "≠": "!="}
_HUNDRED = Num(Fraction(100))


@v_args(inline=True)
class _ToAst(Transformer):
    def number(self, tok):
        return Num(_number(str(tok)))

    def var(self, tok):
        return Var(str(tok))

    def add(self, a, b):
        return BinOp("+", a, b)

    def sub(self, a, b):
        return BinOp("-", a, b)

    def mul(self, a, b):
        return BinOp("*", a, b)

    def div(self, a, b):
        return BinOp("/", a, b)

    def neg(self, a):
        return Neg(a)

    def pow(self, a, b):
        return Pow(a, b)

    def percent(self, a):
        return BinOp("/", a, _HUNDRED)

    def start(self, *items):
        return items  # side, REL, side, REL, side ...


# The transformer runs at reduce time (no tree, no recursion), so deep input cannot overflow it.
_PARSER = Lark(_GRAMMAR, parser="lalr", transformer=_ToAst(), maybe_placeholders=False)
# One side of a relation (the prose claim finder splits relations itself).
_EXPR_PARSER = Lark(
    _GRAMMAR.replace("start: sum (REL sum)+", "start: sum"),
    parser="lalr",
    transformer=_ToAst(),
    maybe_placeholders=False,
)


def _number(text: str) -> Fraction:
    # Built from ASCII digits by hand: Fraction()/int() would also accept other scripts' digits.
    whole, _, frac = text.partition(".")
    value = 0
    for ch in whole + frac:
        value = value * 10 + (ord(ch) - 48)
    return Fraction(value, 10 ** len(frac))


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
    if op == "!=":
        return lhs != rhs
    if op == "<":
        return lhs < rhs
    if op == "<=":
        return lhs <= rhs
    if op == ">":
        return lhs > rhs
    return lhs >= rhs


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


def variables(relations: Iterable[Relation]) -> set[str]:
    """The variable names used by `relations`."""
    names: set[str] = set()
    for rel in relations:
        names |= expr_variables(rel.lhs) | expr_variables(rel.rhs)
    return names


# ---- extraction ------------------------------------------------------------------------------

_HAS_RELATION = re.compile(r"[=<>≤≥≠]")
_REL_SPLIT = re.compile(r"(<=|>=|!=|[=<>≤≥≠])")
_NUMBER_RUN = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+")
_TOKEN = re.compile(r"[0-9]+(?:\.[0-9]+)?|\.[0-9]+|\*\*|<=|>=|!=|\S")
_GSM = re.compile(r"<<(.*?)>>")
_CHECK = re.compile(r"^\s*check\s*:\s*", re.IGNORECASE)
_ANSWER = re.compile(r"^\s*answer\s*:\s*", re.IGNORECASE)


def _precheck(text: str, limits: ClaimLimits) -> None:
    """Cheap scans before parsing: length, digits per number, nesting depth, token count."""
    if len(text) > limits.max_line_chars:
        raise ClaimError("limit", f"line longer than {limits.max_line_chars} characters")
    for m in _NUMBER_RUN.finditer(text):
        if m.end() - m.start() - ("." in m.group()) > limits.max_digits:
            raise ClaimError("limit", f"number with more than {limits.max_digits} digits")
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
            if depth > limits.max_paren_depth:
                raise ClaimError("limit", f"parentheses nested over {limits.max_paren_depth}")
        elif ch == ")":
            depth -= 1
    if len(_TOKEN.findall(text)) > limits.max_tokens:
        raise ClaimError("limit", f"more than {limits.max_tokens} tokens")


def _parse_chain(text: str, limits: ClaimLimits) -> list[Relation]:
    """`a = b < c` -> [a = b, b < c]; every side validated under the limits."""
    _precheck(text, limits)
    try:
        items = _PARSER.parse(text)
    except VisitError as e:  # an error raised inside a transformer callback
        raise ClaimError("unparseable", str(e.orig_exc)) from None
    except LarkError:
        raise ClaimError("unparseable", f"not a relation: {text[:60]!r}") from None
    sides, ops = items[0::2], [_CANONICAL_OP.get(str(t), str(t)) for t in items[1::2]]
    parts = _REL_SPLIT.split(text)
    side_texts = [p.strip() for p in parts[0::2]]
    if len(side_texts) != len(sides):  # cannot happen: relation symbols never nest
        side_texts = [str(s) for s in sides]
    for side in sides:
        _validate(side, limits)
    return [
        Relation(lhs, op, rhs, f"{lt} {str(sym).strip()} {rt}")
        for lhs, op, rhs, lt, sym, rt in zip(
            sides[:-1], ops, sides[1:], side_texts[:-1], parts[1::2], side_texts[1:], strict=True
        )
    ]


def _validate(side: Expr, limits: ClaimLimits) -> None:
    # Exponents and sizes; the value is not kept. A division by zero is well-formed: the
    # checker decides what it means.
    with contextlib.suppress(ZeroDivisionError):
        evaluate(side, limits)
    if degree(side, limits) > limits.max_degree:
        raise ClaimError("limit", f"polynomial degree over {limits.max_degree}")


def parse_sides(text: str, limits: ClaimLimits = DEFAULT_LIMITS) -> list[Expr]:
    """The sides of a relation chain (`a = b < c` -> [a, b, c]), validated; ClaimError else."""
    _precheck(text, limits)
    try:
        items = _PARSER.parse(text)
    except VisitError as e:
        raise ClaimError("unparseable", str(e.orig_exc)) from None
    except LarkError:
        raise ClaimError("unparseable", f"not a relation: {text[:60]!r}") from None
    sides = list(items[0::2])
    for side in sides:
        _validate(side, limits)
    return sides


def parse_expr(text: str, limits: ClaimLimits = DEFAULT_LIMITS) -> Expr:
    """One expression (no relation), validated under the limits; ClaimError otherwise."""
    _precheck(text, limits)
    try:
        (expr,) = _EXPR_PARSER.parse(text)
    except VisitError as e:
        raise ClaimError("unparseable", str(e.orig_exc)) from None
    except LarkError:
        raise ClaimError("unparseable", f"not an expression: {text[:60]!r}") from None
    _validate(expr, limits)
    return expr


def _check_count(num_claims: int, limits: ClaimLimits) -> None:
    if num_claims > limits.max_claims:
        raise ClaimError("limit", f"more than {limits.max_claims} claims in a step")


def _line_claims(line: str, limits: ClaimLimits, answer_var: str | None) -> list[Relation]:
    text = line.strip()
    if text.endswith("."):
        text = text[:-1]
    if "<<" in text:
        spans = _GSM.findall(text)
        if not spans:
            raise ClaimError("unparseable", "unterminated <<...>>")
        _check_count(len(spans), limits)
        return [rel for span in spans for rel in _parse_chain(span, limits)]
    text = _CHECK.sub("", text, count=1)
    if (m := _ANSWER.match(text)) is not None:
        text = text[m.end() :]
        if not _HAS_RELATION.search(text):
            if answer_var is None or not text.strip():
                return []
            (rel,) = _parse_chain(f"{answer_var} = {text}", limits)
            return [rel]
    if not _HAS_RELATION.search(text):
        return []
    parts = text.split(",")
    _check_count(len(parts), limits)
    return [rel for part in parts for rel in _parse_chain(part, limits)]


def extract_claims(
    step: str, limits: ClaimLimits = DEFAULT_LIMITS, answer_var: str | None = None
) -> list[Relation]:
    """The claims of one step, in order.

    A line without a relation symbol gives no claim; one with a relation that does not parse
    raises ClaimError("unparseable"); a limit raises ClaimError("limit"). `answer_var` turns a
    bare `Answer: 5` into `answer_var = 5` (else a bare answer is no claim).
    """
    if len(step) > limits.max_step_chars:
        raise ClaimError("limit", f"step longer than {limits.max_step_chars} characters")
    return list(_extract(step, limits, answer_var))


# A checker reads each step twice (check, then accept): parse it once.
@functools.lru_cache(maxsize=1024)
def _extract(step: str, limits: ClaimLimits, answer_var: str | None) -> tuple[Relation, ...]:
    claims: list[Relation] = []
    for line in step.splitlines():
        if len(line) > limits.max_line_chars:
            raise ClaimError("limit", f"line longer than {limits.max_line_chars} characters")
        claims.extend(_line_claims(line, limits, answer_var))
        _check_count(len(claims), limits)
    if len(variables(claims)) > limits.max_vars:
        raise ClaimError("limit", f"more than {limits.max_vars} variables in a step")
    return tuple(claims)


def clear_parse_cache() -> None:
    """Forget the parsed steps (benchmarks and tests)."""
    _extract.cache_clear()


# The variable that stands for the asked value of "Compute <expr>." style questions.
QUESTION_VAR = "A"
_ASKED = (
    # "Compute (7 + 8) * 3 - 5.", "Calculate 5 - 3 - 6.", "What is 12 + 7?"
    re.compile(r"\b(?:compute|calculate|evaluate|what\s+is)\s+(?P<e>[^=?\n]+?)\s*[.?]?\s*$", re.I),
    # "... the following arithmetic problem: 4 - 1 - 7 ="
    re.compile(r"(?:^|:)\s*(?P<e>[-+(0-9][^=:\n]*?)\s*=\s*$"),
)


def question_premise(text: str, limits: ClaimLimits = DEFAULT_LIMITS) -> Relation | None:
    """`A = <expr>` for a question that asks for the value of a variable-free expression
    (`Compute (7 + 8) * 3 - 5.`, `... problem: 4 - 1 - 7 =`), so a bare `Answer: 40` is
    checked against it; None otherwise. Never raises."""
    try:
        lines = [ln for ln in text[: limits.max_line_chars].strip().splitlines() if ln.strip()]
        if not lines:
            return None
        last = re.sub(r"^\s*Q:\s*", "", lines[-1])
        for pattern in _ASKED:
            if (m := pattern.search(last)) is None:
                continue
            (rel,) = _parse_chain(f"{QUESTION_VAR} = {m.group('e')}", limits)
            if variables([rel]) == {QUESTION_VAR}:
                return rel
    except Exception:  # noqa: BLE001 - free text must never break a job
        return None
    return None


def extract_premises(text: str, limits: ClaimLimits = DEFAULT_LIMITS) -> list[Relation]:
    """The relations stated in free text (a problem statement); the rest is ignored.

    `Solve the system: 4x + y = 33, 2x - y = 3.` -> [4x + y = 33, 2x - y = 3];
    `Solve $6x + 9 = 45$.` -> [6x + 9 = 45] (read like a step: see prose.py);
    `Compute (7 + 8) * 3.` -> [A = (7 + 8) * 3] (see `question_premise`). Never raises.
    """
    asked = question_premise(text, limits)
    if asked is not None:
        return [asked]
    from pipeline.verify.prose import find_claims, relations  # (prose imports this module)

    return relations(find_claims(text[: limits.max_step_chars], limits))[: limits.max_premises]
