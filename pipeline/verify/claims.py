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
from fractions import Fraction

from lark import Lark, Transformer, v_args
from lark.exceptions import LarkError, VisitError

from pipeline.verify import claim_reader
from pipeline.verify.claim_ast import (
    DEFAULT_LIMITS,
    BinOp,
    ClaimError,
    ClaimLimits,
    Expr,
    Neg,
    Num,
    Pow,
    Relation,
    Var,
    degree,
    evaluate,
    variables,
)

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


def _parse(text: str, *, chain: bool = True) -> list:
    """The parser's items for `text`: the hand-written reader's when it reads it (the common
    case, several times faster), else lark's (which raises the errors)."""
    items = claim_reader.read(text, _number, chain=chain)
    if items is not None:
        return items
    return (_PARSER if chain else _EXPR_PARSER).parse(text)


def _number(text: str) -> Fraction:
    # Built from ASCII digits by hand: Fraction()/int() would also accept other scripts' digits.
    whole, _, frac = text.partition(".")
    value = 0
    for ch in whole + frac:
        value = value * 10 + (ord(ch) - 48)
    return Fraction(value, 10 ** len(frac))


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
        items = _parse(text)
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
        items = _parse(text)
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
        (expr,) = _parse(text, chain=False)
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
