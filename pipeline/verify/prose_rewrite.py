"""What each prose token means, settled from its neighbours (pipeline/verify/prose_tokens.py
reads the text into tokens): `x` between numbers is a times sign, a word right after a number
is a unit, `- ` at a line start is a bullet, `10-20` after "pages" is a range; what is not
arithmetic becomes NONARITH, what we do not evaluate UNSUP."""

from __future__ import annotations

from pipeline.verify.prose_tokens import (
    _APPROX_WORDS,
    _RANGE_AFTER,
    _RANGE_BEFORE,
    _REMAINDER,
    _VERSION_WORDS,
    APPROX,
    APPROX_WORD,
    BREAK,
    LP,
    NEWLINE,
    NONARITH,
    NUM,
    OP,
    OPERAND_START,
    REL,
    RP,
    SKIP,
    VAR,
    WORD,
    WORD_OPS,
    Token,
)
from pipeline.verify.prose_words import words_to_math


def rewrite(tokens: list[Token]) -> list[Token]:
    """Settle what each token means from its neighbours (see the module docstring)."""
    kinds = {t.kind for t in tokens}
    if LP in kinds or SKIP in kinds:  # (the passes below skip what cannot apply: a bare
        tokens = _braces(tokens)  # equation line is the most common step there is)
    out: list[Token] = []
    line_start = True
    n = len(tokens)
    skip_next = False
    for i, t in enumerate(tokens):
        if skip_next:
            skip_next = False
            continue
        prev = out[-1] if out else None
        nxt = tokens[i + 1] if i + 1 < n else None
        if t.kind == NEWLINE:
            out.append(Token(BREAK, "", t.start, t.end))
            line_start = True
            continue
        if line_start and _is_list_marker(t, nxt):
            continue  # "- ", "* ", "1. ", "> ": markdown, not arithmetic
        line_start = False
        if t.kind == OP and t.star and not (_ends_operand(prev) and _starts_operand(nxt)):
            continue  # "*" / "**" between operands multiplies / raises; else it is emphasis
        if t.kind == OP and t.math == "–":
            ranged = _adjacent(prev, t) and _adjacent(t, nxt) and prev.kind == nxt.kind == NUM
            out.append(Token(NONARITH if ranged else BREAK, "–", t.start, t.end))
            continue
        if t.kind in (WORD, VAR):
            meant = _word_meaning(t, prev, nxt, out)
            if meant is not None:
                out += meant
                skip_next = len(meant) == 2  # a version word took its number along
                continue
        out.append(t)
    words = WORD in kinds or VAR in kinds
    if words:
        out = words_to_math(out)
    if len(out) > 3:
        out = _mixed_numbers(out)
    if words:
        out = _ranges(out)
        out = _units_and_letters(out)
    return out


def _word_meaning(
    t: Token, prev: Token | None, nxt: Token | None, out: list[Token]
) -> list[Token] | None:
    """What a word or letter stands for among math tokens; None: itself."""
    word = t.math.lower()
    if t.kind == VAR and word == "x" and _ends_operand(prev, allow_var=False) and nxt is not None:
        spaced = prev is not None and prev.end < t.start
        if nxt.kind == NUM or (nxt.kind == LP and spaced):
            return [Token(OP, "*", t.start, t.end)]  # "0.2 x 50": times
    if t.kind == WORD and word in WORD_OPS and _ends_operand(prev) and _starts_operand(nxt):
        return [Token(OP, WORD_OPS[word], t.start, t.end)]  # "5 plus 3 = 8"
    if word == "of" and _starts_operand(nxt) and _ends_fraction(out):
        return [Token(OP, "*", t.start, t.end)]  # "20% of 50", "3/4 of 20"
    if nxt is not None and nxt.kind == NUM:
        if word == "v" and nxt.start == t.end:
            return [Token(NONARITH, "version", t.start, t.end)]  # "v2.10"
        if word in _VERSION_WORDS:
            return [t, Token(NONARITH, "version", nxt.start, nxt.end)]  # "Python 3.11"
        if t.math in _REMAINDER and prev is not None and prev.kind == NUM:
            return [Token(NONARITH, "remainder", t.start, t.end)]  # "= 3 remainder 1"
    if t.kind == WORD and word in _APPROX_WORDS:
        return [Token(APPROX_WORD, word, t.start, t.end)]
    return None


def _ends_fraction(out: list[Token]) -> bool:
    """`20%`, `(3/4)` or `3/4` just before: "of" after them multiplies."""
    if not out:
        return False
    last = out[-1]
    if last.math in ("%", ")", "))"):
        return True
    return last.kind == NUM and len(out) > 1 and out[-2].kind == OP and out[-2].math == "/"


def _adjacent(a: Token | None, b: Token | None) -> bool:
    return a is not None and b is not None and a.end == b.start


def _ends_operand(t: Token | None, allow_var: bool = True) -> bool:
    if t is None:
        return False
    return t.kind in (NUM, RP) or (allow_var and t.kind == VAR) or (t.kind == OP and t.math == "%")


def _starts_operand(t: Token | None) -> bool:
    return t is not None and t.kind in OPERAND_START


def _is_list_marker(t: Token, nxt: Token | None) -> bool:
    if t.kind == OP and t.math in ("-", "*", "+") and nxt is not None and nxt.start > t.end:
        return True  # "- 2 + 3 = 5" is a bullet, not a minus
    if t.kind == REL and t.math == ">" and nxt is not None and nxt.start > t.end:
        return True  # "> quote"
    if t.kind == NUM and nxt is not None and nxt.kind in (BREAK, RP) and nxt.start == t.end:
        return nxt.kind == RP or nxt.math == "."  # "1. First, ..." / "2) Then ..."
    return False


def _braces(tokens: list[Token]) -> list[Token]:
    """LaTeX groups: `{`/`}` are parentheses, except around `\\text{...}` (dropped) and in
    `\\frac{a}{b}`, which becomes `((a)/(b))`."""
    stack: list[str] = []  # the role of each open brace
    pending: str | None = None  # the role of the next "{": "text" | "num" | "den"
    for i, t in enumerate(tokens):
        if t.kind == LP and t.math == "\\frac":
            mixed = i > 0 and tokens[i - 1].kind == NUM  # "1\\frac{7}{12}" is 1 + 7/12
            t.math, pending = ("+(" if mixed else "("), "num"
            continue
        if t.kind == SKIP and t.math == "\\text":
            pending = "text"
            continue
        if t.kind == LP and t.math == "{":
            role, pending = pending or "group", None
            stack.append(role)
            if role == "text":
                t.kind = SKIP
            elif role == "den":
                t.kind, t.math = OP, "/("
            else:
                t.math = "("
            continue
        if t.kind == RP and t.math == "}":
            role = stack.pop() if stack else "group"
            if role == "text":
                t.kind = SKIP
                if i > 0 and tokens[i - 1].kind == WORD:  # "\\text{cm}^2": one unit, power too
                    tokens[i - 1].end = t.end
            elif role == "num":
                t.math, pending = ")", "den"
            else:
                t.math = "))" if role == "den" else ")"
            continue
        pending = None  # `\\frac{a} b`, `\\text x`: not groups we read
    return [t for t in tokens if t.kind != SKIP]


def _mixed_numbers(tokens: list[Token]) -> list[Token]:
    """`4 1/2` is 4 + 1/2 (a whole number, a space, a proper fraction)."""
    out: list[Token] = []
    for i, t in enumerate(tokens):
        out.append(t)
        if t.kind != NUM or "." in t.math or i + 3 >= len(tokens):
            continue
        a, slash, b = tokens[i + 1 : i + 4]
        if a.kind != NUM or b.kind != NUM or slash.math != "/" or a.start == t.end:
            continue
        tight = a.end == slash.start and slash.end == b.start
        if tight and "." not in a.math + b.math and int(a.math) < int(b.math):
            out.append(Token(OP, "+", t.end, a.start))
    return out


def _ranges(tokens: list[Token]) -> list[Token]:
    """`pages 10-20`, `won 3-1`, `a 3-2 win`: a hyphen between numbers is a range or a score
    when the words around say so."""
    out: list[Token] = []
    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        if (
            t.kind == NUM
            and i + 2 < n
            and tokens[i + 1].kind == OP
            and tokens[i + 1].math == "-"
            and tokens[i + 2].kind == NUM
            and t.end == tokens[i + 1].start
            and tokens[i + 1].end == tokens[i + 2].start
        ):
            before = out[-1].math.lower() if out and out[-1].kind == WORD else ""
            after = tokens[i + 3] if i + 3 < n else None
            after_word = after.math.lower() if after is not None and after.kind == WORD else ""
            if before in _RANGE_BEFORE or after_word in _RANGE_AFTER:
                out.append(Token(NONARITH, "range", t.start, tokens[i + 2].end))
                i += 3
                continue
        out.append(t)
        i += 1
    return out


def _units_and_letters(tokens: list[Token]) -> list[Token]:
    """Drop unit words (`5 apples + 3 apples`: a word run right after an operand, followed by
    an operator, a relation or a closing parenthesis) and read single letters that stand
    among words (`a`, `I`) as words, not variables."""
    out: list[Token] = []
    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        if _is_unit(t) and out and _ends_operand(out[-1]) and out[-1].kind != VAR:
            j = _unit_end(tokens, i + 1)
            while j < n and j - i < 3 and _is_unit(tokens[j]):
                j = _unit_end(tokens, j + 1)
            follow = tokens[j] if j < n else None
            if follow is not None and follow.kind in (OP, REL, RP, APPROX):
                out[-1].unit = " ".join(x.math for x in tokens[i:j] if x.kind == WORD)
                i = j  # a unit: "10 km + 5 km", "3 hours × 60"
                continue
        if t.kind == VAR and t.math not in _VAR_LETTERS and out and out[-1].kind == NUM:
            nxt = tokens[i + 1] if i + 1 < n else None
            if out[-1].end < t.start and (nxt is None or nxt.kind not in (NUM, LP, VAR)):
                out[-1].unit = t.math
                i = _unit_end(tokens, i + 1)  # "1600 m", "2.5 g", "28 km/h", "14.7 m²"
                continue
        if t.kind == OP and t.math == "/" and out and out[-1].kind == NUM and i + 1 < n:
            rate = tokens[i + 1]  # "€2.35/kg": a price per unit, not a division
            tight = out[-1].end == t.start and rate.start == t.end
            if tight and _is_unit(rate) and len(rate.math) > 1:
                out[-1].unit = f"/{rate.math}"
                i += 2
                continue
        if t.kind == VAR:
            prev = out[-1] if out else None
            nxt = tokens[i + 1] if i + 1 < n else None
            if _wordish(prev) and _wordish(nxt):
                t = Token(WORD, t.math, t.start, t.end)
        out.append(t)
        i += 1
    return out


_VAR_LETTERS = frozenset("xyznabpqk")  # letters that are more often variables than units
# Words that join a sentence, never a unit after a number ("-6 and -6 + 6 = 0").
_FUNCTION_WORDS = frozenset(
    "and or but so then thus hence is are was were be to the an which that because since for "  # noqa: SIM905
    "if when while where as at by on in into we you it this these those gives get gets makes "
    "equals yes no not also too now here there than plus minus times of per each with from "
    "over under giving making leaving yields".split()
)


def _is_unit(t: Token) -> bool:
    return t.kind == WORD and t.math.lower() not in _FUNCTION_WORDS


def _unit_end(tokens: list[Token], j: int) -> int:
    """Past a unit's tail: "²" / "^2" right after it, or "/h" ("km/h")."""
    if j + 1 >= len(tokens) or tokens[j].kind != OP or tokens[j].start != tokens[j - 1].end:
        return j
    if tokens[j].math == "^":
        return j + 2
    tail = tokens[j + 1]
    if tokens[j].math == "/" and tail.kind in (WORD, VAR) and tail.start == tokens[j].end:
        return j + 2
    return j


def _wordish(t: Token | None) -> bool:
    return t is None or t.kind in (WORD, BREAK, APPROX_WORD)
