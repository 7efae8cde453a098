"""What each prose token means, settled from its neighbours (pipeline/verify/prose_tokens.py
reads the text into tokens): `x` between numbers is a times sign, a word right after a number
is a unit, `- ` at a line start is a bullet, `10-20` after "pages" is a range; what is not
arithmetic becomes NONARITH, what we do not evaluate UNSUP."""

from __future__ import annotations

from pipeline.verify.prose_names import named_quantities
from pipeline.verify.prose_tokens import (
    _APPROX_WORDS,
    _RANGE_AFTER,
    _RANGE_BEFORE,
    _REMAINDER,
    _VERSION_WORDS,
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
from pipeline.verify.prose_units import units_and_letters
from pipeline.verify.prose_words import words_to_math


def rewrite(tokens: list[Token]) -> list[Token]:
    """Settle what each token means from its neighbours (see the module docstring)."""
    kinds = {t.kind for t in tokens}
    if LP in kinds or SKIP in kinds:  # (the passes below skip what cannot apply: a bare
        tokens = _braces(tokens)  # equation line is the most common step there is)
        if WORD in kinds:
            tokens = _word_parentheses(tokens)
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
        if t.kind == OP and t.star and not _star_is_operator(out, t, nxt, tokens[i + 2 : i + 8]):
            continue  # "*" / "**" between operands multiplies / raises; else it is emphasis
        if t.kind == OP and t.math == "–":
            ranged = _adjacent(prev, t) and _adjacent(t, nxt) and prev.kind == nxt.kind == NUM
            minus = not ranged and _dash_is_minus(out, nxt)
            kind = OP if minus else NONARITH if ranged else BREAK
            out.append(Token(kind, "-" if minus else "–", t.start, t.end))
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
        out = named_quantities(units_and_letters(out))
    return out


def _word_meaning(
    t: Token, prev: Token | None, nxt: Token | None, out: list[Token]
) -> list[Token] | None:
    """What a word or letter stands for among math tokens; None: itself."""
    word = t.math.lower()
    if t.kind == VAR and word == "x" and nxt is not None and _x_after_operand(out):
        spaced = prev is not None and prev.end < t.start
        if nxt.kind == NUM or (nxt.kind == LP and spaced):
            return [Token(OP, "*", t.start, t.end)]  # "0.2 x 50", "200 balls x (20 / 100)"
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


def _star_is_operator(out: list[Token], star: Token, nxt: Token | None, ahead: list[Token]) -> bool:
    """`*` between operands multiplies, also when the left one has a unit (`60 meters * 3`)
    or the right one is a named quantity (`(3/4)*number of novels`); markdown emphasis
    (`**Answer:**`, `*note*`) has no operand on its left, or a closing star ahead."""
    j = len(out)
    while j > 0 and j > len(out) - 5 and _in_unit(out[j - 1], out[j - 2] if j > 1 else None):
        j -= 1  # past a unit: "60 meters *", "15 teeth /", "60 km/hr *", "5 eggs per day *"
    if j < len(out) and (j == 0 or out[j - 1].kind in (REL, LP, BREAK)):
        # "= price * 3", "which means: number of pages*(2/3) = 96": a named quantity, then "*"
        return _starts_operand(nxt)
    if j == 0 or not _ends_operand(out[j - 1]) or (j < len(out) and out[j - 1].kind == VAR):
        return False
    if _starts_operand(nxt):
        return True
    # "(3/4)*number", "(2/3)* amount", "1/3 * Class C": never markdown's "*word*"
    spaced = nxt is not None and out[-1].end < star.start and nxt.start > star.end
    tight = nxt is not None and (nxt.start == star.end or out[-1].kind == RP or spaced)
    if nxt is None or nxt.kind != WORD or star.math != "*" or not tight:
        return False
    return not any(t.kind == OP and t.star for t in ahead)  # "(3/4)*number of novels"


def _x_after_operand(out: list[Token]) -> bool:
    """A number before `x`, maybe with its unit between (`200 basketballs x (20 / 100)`, `1 cup
    of dog food x 100%`: up to three words, or four with an `of`)."""
    j = len(out)
    while j > 0 and j > len(out) - 5 and out[j - 1].kind == WORD:
        j -= 1
    unit = [t.math.lower() for t in out[j:]]
    if len(unit) > 3 and "of" not in unit[1:-1]:
        return False
    if j == 0 or not _ends_operand(out[j - 1], allow_var=False):
        return False
    return j == len(out) or out[j - 1].kind == NUM


def _dash_is_minus(out: list[Token], nxt: Token | None) -> bool:
    """An en dash between operands subtracts inside a computation under way (`x = 304 – 180`,
    `2x + 180 – x = 304`, `240 students – (40 + 84)`); elsewhere it is a dash or a range."""
    if not _starts_operand(nxt):
        return False
    if nxt is not None and nxt.kind == LP:
        return bool(out) and _ends_operand(out[-1]) or _in_unit(out[-1], None)
    for t in reversed(out):
        if t.kind in (REL,) or (t.kind == OP and t.math not in ("%", "–")):
            return True
        if t.kind == BREAK:
            return False
    return False


def _in_unit(t: Token, before: Token | None) -> bool:
    if t.kind == WORD:
        return True
    if t.kind == VAR and t.math == "a" and before is not None and before.kind == WORD:
        return True  # the article of a rate: "5 days a week *"
    # the "/" of "km/hr", tight between two words
    return (
        t.kind == OP
        and t.math == "/"
        and before is not None
        and before.kind == WORD
        and (before.end == t.start)
    )


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


_ASIDE_MARKS = frozenset(",;:'")  # what may stand among an aside's words


def _word_parentheses(tokens: list[Token]) -> list[Token]:
    """An aside in words after an operand (`$20 (for the shirt) + $15`, `4 (the number of
    girls) + 5 = 11`, `= 10 (total)`) labels the number: dropped, so the arithmetic around it
    reads. An aside holding a number, an operator or a lone letter, or one written tight
    against its operand (`3(x)`, `.4(Number of Minutes)`: a product), is not one."""
    drop: set[int] = set()
    for i, t in enumerate(tokens):
        if t.kind != LP or t.math != "(" or i == 0 or not _labels_operand(tokens, i):
            continue
        if tokens[i - 1].end == t.start:
            continue  # `.4(Number of Minutes)`: a coefficient times a named quantity
        j = i + 1
        while j < len(tokens) and (
            tokens[j].kind in (WORD, VAR)
            or (tokens[j].kind == BREAK and tokens[j].math in _ASIDE_MARKS)
        ):
            j += 1
        inner = tokens[i + 1 : j]
        if j == len(tokens) or tokens[j].kind != RP or tokens[j].math != ")":
            continue
        if not any(x.kind == WORD and len(x.math) > 1 for x in inner):
            continue
        follow = tokens[j + 1] if j + 1 < len(tokens) else None
        if follow is None or follow.kind in (OP, REL, RP, BREAK):
            drop.update(range(i, j + 1))
    return [t for k, t in enumerate(tokens) if k not in drop] if drop else tokens


def _labels_operand(tokens: list[Token], i: int) -> bool:
    """`tokens[i]` (an open parenthesis) comes right after an operand, or after a number's
    one-word unit (`4 girls (in class A) + 5 boys`)."""
    prev = tokens[i - 1]
    if _ends_operand(prev, allow_var=True):
        return True
    return prev.kind == WORD and i > 1 and tokens[i - 2].kind == NUM


def _mixed_numbers(tokens: list[Token]) -> list[Token]:
    """`4 1/2` is (4 + 1/2) (a whole number, a space, a proper fraction): one number, so
    `1 1/2 / 1/2` is 3."""
    out: list[Token] = []
    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        if t.kind == NUM and "." not in t.math and i + 3 < n:
            a, slash, b = tokens[i + 1 : i + 4]
            mixed = a.kind == b.kind == NUM and slash.math == "/" and a.start > t.end
            tight = mixed and a.end == slash.start and slash.end == b.start
            if tight and "." not in a.math + b.math and int(a.math) < int(b.math):
                out += [Token(LP, "(", t.start, t.start), t, Token(OP, "+", t.end, a.start),
                        a, slash, b, Token(RP, ")", b.end, b.end)]  # fmt: skip
                i += 4
                continue
        if t.kind == NUM and out and out[-1].kind == REL and (k := _and_fraction_len(tokens, i)):
            # "17/3 = 5 and 2/3 loads", "100 / 6= 16 and (2/3)": a mixed number in words
            frac = tokens[i + 2 : i + 1 + k]
            out += [Token(LP, "(", t.start, t.start), t, Token(OP, "+", t.end, frac[0].start),
                    *frac, Token(RP, ")", frac[-1].end, frac[-1].end)]  # fmt: skip
            i += 1 + k
            continue
        if (
            t.kind == NUM
            and out
            and out[-1].math == "/"
            and i + 2 < n
            and _tight_fraction(tokens[i : i + 3])
        ):
            # "1 1/2 / 1/2": a fraction written tight after a division is one divisor
            out += [Token(LP, "(", t.start, t.start), *tokens[i : i + 3],
                    Token(RP, ")", tokens[i + 2].end, tokens[i + 2].end)]  # fmt: skip
            i += 3
            continue
        out.append(t)
        i += 1
    return out


def _and_fraction(four: list[Token]) -> bool:
    """`and 2/3` (a proper fraction, after the whole number of a mixed one)."""
    if len(four) != 4:
        return False
    word, *frac = four
    if word.kind != WORD or word.math.lower() != "and" or not _tight_fraction(frac):
        return False
    return int(frac[0].math) < int(frac[2].math)


def _and_fraction_len(tokens: list[Token], i: int) -> int:
    """How many tokens after `tokens[i]` make `and 2/3` or `and (2/3)`; 0 for none."""
    if _and_fraction(tokens[i + 1 : i + 5]):
        return 4
    bracketed = i + 6 < len(tokens) and tokens[i + 2].kind == LP and tokens[i + 6].kind == RP
    if bracketed and _and_fraction([tokens[i + 1], *tokens[i + 3 : i + 6]]):
        return 6
    return 0


def _tight_fraction(three: list[Token]) -> bool:
    a, slash, b = three
    return (
        a.kind == b.kind == NUM and slash.math == "/" and a.end == slash.start
        and slash.end == b.start and "." not in a.math + b.math
    )  # fmt: skip


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
