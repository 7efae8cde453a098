"""A tiny, safe parser for the arithmetic in reasoning steps; exact rationals, never `eval`.

Grammar (whitelist): numbers (`12`, `3.5`, `.5`), `%` after a number or a parenthesis,
`+ - * / × ÷ ^`, parentheses, one-letter variables (not words), implicit multiplication
(`3x`, `2(x + 1)`), unary minus. A value is a `Fraction`, or `None` when the expression has a
free variable.
"""

from __future__ import annotations

import re
from fractions import Fraction

# A variable is one letter on its own: `3x` and `x y` parse, words (`total`) do not.
_TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?|\.\d+)|([A-Za-z])(?![A-Za-z])|(\*\*|[-+*/×÷^()%]))")
MAX_EXPONENT = 64
MAX_CHARS = 400


class ExprError(ValueError):
    """Text that is not an expression of the step grammar."""


def tokenize(text: str) -> list[tuple[str, str]]:
    if len(text) > MAX_CHARS:
        raise ExprError("expression too long")
    tokens: list[tuple[str, str]] = []
    pos, text = 0, text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise ExprError(f"unexpected {text[pos : pos + 10]!r}")
        num, var, op = m.groups()
        if num is not None:
            tokens.append(("num", num))
        elif var is not None:
            tokens.append(("var", var))
        else:
            tokens.append(("op", {"×": "*", "÷": "/", "**": "^"}.get(op, op)))
        pos = m.end()
    if not tokens:
        raise ExprError("empty expression")
    return tokens


class _Parser:
    def __init__(self, tokens: list[tuple[str, str]], env: dict[str, Fraction]) -> None:
        self.tokens, self.pos, self.env = tokens, 0, env

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise ExprError(f"expected {value or 'more'}, got {tok[1] if tok else 'end'}")
        self.pos += 1
        return tok

    def expr(self) -> Fraction | None:
        value = self.term()
        while (tok := self.peek()) and tok[1] in "+-" and tok[0] == "op":
            self.pos += 1
            rhs = self.term()
            value = (
                None
                if value is None or rhs is None
                else (value + rhs if tok[1] == "+" else value - rhs)
            )
        return value

    def term(self) -> Fraction | None:
        value = self.unary()
        while (tok := self.peek()) is not None:
            if tok[0] == "op" and tok[1] in "*/":
                self.pos += 1
                rhs = self.unary()
                if value is None or rhs is None:
                    value = None
                elif tok[1] == "*":
                    value = value * rhs
                elif rhs == 0:
                    raise ZeroDivisionError("division by zero")
                else:
                    value = value / rhs
            elif tok[0] == "var" or tok[1] == "(":  # implicit multiplication: 3x, 2(x + 1)
                rhs = self.power()
                value = None if value is None or rhs is None else value * rhs
            else:
                break
        return value

    def unary(self) -> Fraction | None:
        tok = self.peek()
        if tok and tok[0] == "op" and tok[1] in "+-":
            self.pos += 1
            value = self.unary()
            return None if value is None else (-value if tok[1] == "-" else value)
        return self.power()

    def power(self) -> Fraction | None:
        base = self.atom()
        tok = self.peek()
        if tok and tok[1] == "^":
            self.pos += 1
            exp = self.unary()
            if base is None or exp is None:
                return None
            if exp.denominator != 1 or abs(exp) > MAX_EXPONENT:
                raise ExprError("only small integer exponents")
            if base == 0 and exp < 0:
                raise ZeroDivisionError("zero to a negative power")
            return base ** int(exp)
        return base

    def atom(self) -> Fraction | None:
        kind, text = self.take()
        if kind == "num":
            value: Fraction | None = Fraction(text)
        elif kind == "var":
            value = self.env.get(text)
        elif text == "(":
            value = self.expr()
            self.take(")")
        else:
            raise ExprError(f"unexpected {text!r}")
        tok = self.peek()
        if tok and tok[1] == "%":
            self.pos += 1
            value = None if value is None else value / 100
        return value


def evaluate(text: str, env: dict[str, Fraction] | None = None) -> Fraction | None:
    """The exact value of `text`; None if it has a variable not in `env`.

    Raises ExprError for text outside the grammar and ZeroDivisionError for a division by 0.
    """
    parser = _Parser(tokenize(text), env or {})
    value = parser.expr()
    if parser.peek() is not None:
        raise ExprError(f"unexpected {parser.peek()[1]!r}")
    return value


def is_expression(text: str) -> bool:
    try:
        evaluate(text)
    except ZeroDivisionError:
        return True  # well-formed, just false
    except ExprError:
        return False
    return True


def format_number(value: Fraction) -> str:
    """Canonical text: `12`, `-3`, `7/2`."""
    return (
        str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
    )
