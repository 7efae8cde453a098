"""A hand-written reader of the claim grammar (pipeline/verify/claims.py): the same trees as
the lark LALR parser, at a fraction of its cost.

Every check reads its claims, and lark's LALR driver (a Python loop over parser states and
tokens) was the largest single cost of a bare-line check (`16 * 3 = 10 * 3 + 6 * 3 = 48`). This
module reads the grammar by recursive descent, one function per rule, and builds the same AST.
It only has to be right when it succeeds: on anything it does not read (an error, a token it
does not know), it returns None and the lark parser decides, with its own error message. A
test (tests/unit/verify/test_claim_reader.py) holds the two equal on generated input.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from fractions import Fraction

from pipeline.verify.claim_ast import BinOp, Expr, Neg, Num, Pow, Var

# The grammar's terminals, in the lexer's terms: spaces and tabs are ignored, NUMBER, a
# one-letter VAR, the relations (longest first) and the operators.
_TOKEN = re.compile(
    r"[ \t]+"
    r"|(?P<num>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)"
    r"|(?P<var>(?<![A-Za-z])[A-Za-z](?![A-Za-z]))"
    r"|(?P<rel><=|>=|!=|[=<>≤≥≠])"
    r"|(?P<op>\*\*|[-+−*×/÷^%()])"
)
_HUNDRED = Num(Fraction(100))
_ADD = {"+": "+", "-": "-", "−": "-"}
_MUL = {"*": "*", "×": "*", "/": "/", "÷": "/"}
_END = ("", "")


class _Unread(Exception):
    """Not read here: the lark parser decides."""


def _tokens(text: str) -> list[tuple[str, str]]:
    out, pos, n = [], 0, len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            raise _Unread
        pos = m.end()
        if m.lastgroup is not None:
            out.append((m.lastgroup, m.group(m.lastgroup)))
    return out


class _Reader:
    def __init__(self, tokens: list[tuple[str, str]], number: Callable[[str], Fraction]) -> None:
        self.tokens, self.i, self.number = tokens, 0, number

    def peek(self) -> tuple[str, str]:
        return self.tokens[self.i] if self.i < len(self.tokens) else _END

    def take(self) -> tuple[str, str]:
        tok = self.peek()
        self.i += 1
        return tok

    def chain(self) -> list:
        items: list = [self.sum()]
        while self.peek()[0] == "rel":
            items.append(self.take()[1])
            items.append(self.sum())
        return items

    def sum(self) -> Expr:
        a = self.product()
        while (op := _ADD.get(self.peek()[1])) is not None:
            self.i += 1
            a = BinOp(op, a, self.product())
        return a

    def product(self) -> Expr:
        a = self.unary()
        while True:
            kind, value = self.peek()
            if (op := _MUL.get(value)) is not None:
                self.i += 1
                a = BinOp(op, a, self.unary())
            elif kind == "var" or value == "(":  # implicit multiplication: `2x`, `3(x + 1)`
                a = BinOp("*", a, self.power(self.implicit_atom))
            else:
                return a

    def unary(self) -> Expr:
        value = self.peek()[1]
        if value in ("-", "−"):
            self.i += 1
            return Neg(self.unary())
        if value == "+":
            self.i += 1
            return self.unary()
        return self.power(self.atom)

    def power(self, atom: Callable[[], Expr]) -> Expr:
        a = atom()
        if self.peek()[1] == "%":
            self.i += 1
            a = BinOp("/", a, _HUNDRED)
        if self.peek()[1] in ("^", "**"):
            self.i += 1
            return Pow(a, self.unary())
        return a

    def atom(self) -> Expr:
        kind, value = self.peek()
        if kind == "num":
            self.i += 1
            return Num(self.number(value))
        return self.implicit_atom()

    def implicit_atom(self) -> Expr:
        kind, value = self.take()
        if kind == "var":
            return Var(value)
        if value == "(":
            inner = self.sum()
            if self.take()[1] != ")":
                raise _Unread
            return inner
        raise _Unread


def read(text: str, number: Callable[[str], Fraction], *, chain: bool) -> list | None:
    """The parser's items for `text`: [side, REL, side, ...] when `chain` (at least one
    relation), else [expr]; None when this reader does not read it."""
    try:
        reader = _Reader(_tokens(text), number)
        items = reader.chain() if chain else [reader.sum()]
    except (_Unread, RecursionError):
        return None
    if reader.i != len(reader.tokens) or (chain and len(items) < 3):
        return None
    return items
