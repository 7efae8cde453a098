"""Arithmetic said in words: `12 times 7 is 84`, `half of 48 is 24`, `the sum of 5 and 8 is 13`.

A pass over the claim finder's tokens (prose_tokens.py) that turns a few fixed phrases into
operators and relations, each synthetic token keeping the span of the words it stands for.
It reads a verb as `=` only after a computation (an operator since the last word or break:
`84 + 16 is 100`, not `Step 3 is 4 × 5`) and before a number, so a sentence that merely
mentions numbers makes no claim.
"""

from __future__ import annotations

from pipeline.verify.prose_tokens import BREAK, LP, NUM, OP, REL, RP, VAR, WORD, WORD_OPS, Token

_IS = {"is", "equals", "makes", "gives", "leaves", "yields", "totals", "are", "was", "were",
       "comes", "get", "gets"}  # fmt: skip
_BY = {"divided": "/", "multiplied": "*"}  # "... divided by 12"
_FRACTION_OF = {"half": (1, 2), "third": (1, 3), "quarter": (1, 4), "fifth": (1, 5),
                "tenth": (1, 10)}  # fmt: skip
_TIMES_OF = {"twice": 2, "double": 2, "triple": 3, "thrice": 3}
_PAIR_OF = {"sum": "+", "total": "+", "product": "*", "difference": "-"}


def _w(t: Token | None) -> str:
    return t.math.lower() if t is not None and t.kind in (WORD, VAR) else ""


def _synthetic(kinds_maths: list[tuple[str, str]], start: int, end: int) -> list[Token]:
    return [Token(k, m, start, end) for k, m in kinds_maths]


_NUMBERS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen "
            "fourteen fifteen sixteen seventeen eighteen nineteen twenty")  # fmt: skip
_NUMBER_WORDS = {w: i for i, w in enumerate(_NUMBERS.split())}  # noqa: SIM905
_ARITH_WORDS = {"times", "plus", "minus", "dozen", "divided", "multiplied", "of"}


def _number_words(tokens: list[Token]) -> list[Token]:
    """`seven times eight`: a number word next to an arithmetic word is a number."""
    out = list(tokens)
    for i, t in enumerate(tokens):
        w = _w(t)
        if w not in _NUMBER_WORDS:
            continue
        near = {_w(tokens[j]) for j in (i - 1, i + 1) if 0 <= j < len(tokens)}
        if near & (_ARITH_WORDS - {"of"}) or (w != "one" and "dozen" in near):
            out[i] = Token(NUM, str(_NUMBER_WORDS[w]), t.start, t.end)
    return out


def words_to_math(tokens: list[Token]) -> list[Token]:
    tokens = _number_words(tokens)
    # "3 dozen cookies - 2 dozen = 1 dozen": dozens counted on one side are counted on all
    in_dozens = any(
        _w(t) == "dozen" and i > 1 and tokens[i - 1].kind == NUM and tokens[i - 2].kind == REL
        for i, t in enumerate(tokens)
    )
    out: list[Token] = []
    i, n = 0, len(tokens)
    while i < n:
        t, w = tokens[i], _w(tokens[i])
        nxt = tokens[i + 1] if i + 1 < n else None
        after = tokens[i + 2] if i + 2 < n else None
        # "divided by" / "multiplied by" between operands
        if w in _BY and _w(nxt) == "by" and _operand_end(out) and _num(after):
            out.append(Token(OP, _BY[w], t.start, nxt.end))
            i += 2
            continue
        # "half of 48", "a third of 90"
        if w in _FRACTION_OF and _w(nxt) == "of" and _num(after):
            if out and _w(out[-1]) in ("a", "one"):
                out.pop()  # "a third of 24"
            a, b = _FRACTION_OF[w]
            out += _synthetic([(LP, "("), (NUM, str(a)), (OP, "/"), (NUM, str(b)), (RP, ")"),
                               (OP, "*")], t.start, nxt.end)  # fmt: skip
            i += 2
            continue
        # "twice 12", "double 15"
        if w in _TIMES_OF and _num(nxt):
            out += _synthetic([(NUM, str(_TIMES_OF[w])), (OP, "*")], t.start, t.end)
            i += 1
            continue
        # "4 dozen" -> 4 * 12; "a dozen" -> 12; but "84/12 = 7 dozen", "4 dozen * 12 = 48":
        # a count of dozens, its unit (a result, or converted by the 12 that follows)
        if w == "dozen" and (in_dozens or _counts_dozens(out, tokens[i + 1 : i + 5])):
            out.append(t)
            i += 1
            continue
        if w == "dozen" and out and out[-1].kind == OP and out[-1].math == "/":
            out.append(t)  # "12 eggs/dozen": a rate's unit
            i += 1
            continue
        if w == "dozen":
            if out and out[-1].kind == NUM:
                out += _synthetic([(OP, "*"), (NUM, "12")], t.start, t.end)
            else:
                if out and _w(out[-1]) in ("a", "one"):
                    out.pop()
                out.append(Token(NUM, "12", t.start, t.end))
            i += 1
            continue
        # "the sum of 5 and 8", "the product of 6 and 7", "the difference between 9 and 4"
        if w in _PAIR_OF and _w(nxt) in ("of", "between") and i + 4 < n:
            a, conj, b = tokens[i + 2], tokens[i + 3], tokens[i + 4]
            if a.kind == NUM and _w(conj) == "and" and b.kind == NUM:
                op = _PAIR_OF[w]
                out += _synthetic([(LP, "(")], t.start, nxt.end)
                out += [a, Token(OP, op, conj.start, conj.end), b]
                out += _synthetic([(RP, ")")], b.end, b.end)
                i += 5
                continue
        # "20 more than 45", "25% more than 80", "3 fewer than 10": the second changed by the first
        if w in _MORE and _w(nxt) == "than" and after is not None and after.kind == NUM:
            changed = _more_than(out, t, after)
            if changed is not None:
                out += changed
                i += 3
                continue
        # "seven times eight" (number words read here, after the first pass)
        if w in WORD_OPS and _operand_end(out) and _num(nxt):
            out.append(Token(OP, WORD_OPS[w], t.start, t.end))
            i += 1
            continue
        # "5 times 2.5, which is 12.5"
        comma = out[-1] if out and out[-1].kind == BREAK and out[-1].math == "," else None
        if w == "which" and _w(nxt) == "is" and comma is not None:
            out.pop()
            if _computation_before(out) and _num(after):
                out.append(Token(REL, "=", comma.start, nxt.end))
                i += 2
                continue
            out.append(comma)
        # "... is 84", "... equals 84", "is equal to 84"
        if w in _IS or w == "equal":
            j = i + 1
            while j < n and _w(tokens[j]) in ("equal", "to", "exactly", "then", "us"):
                j += 1
            if j < n and _num(tokens[j]) and _computation_before(out):
                out.append(Token(REL, "=", t.start, tokens[j - 1].end))
                i = j
                continue
        out.append(t)
        i += 1
    return out


_MORE = {"more": "+", "less": "-", "fewer": "-"}


def _more_than(out: list[Token], word: Token, base: Token) -> list[Token] | None:
    """`N more than M` -> (M + N); `N% more than M` -> (M + M * N%); None when what comes
    before the word is not one number (or one percentage), which is then taken off `out`."""
    if out and out[-1].kind == OP and out[-1].math == "%" and len(out) > 1 and out[-2].kind == NUM:
        amount = out[-2:]
    elif out and out[-1].kind == NUM:
        amount = out[-1:]
    else:
        return None
    del out[-len(amount) :]
    sign = Token(OP, _MORE[_w(word)], word.start, word.end)
    if len(amount) == 2:  # a percentage of the base
        times = Token(OP, "*", word.start, word.end)
        part = [Token(NUM, base.math, base.start, base.end), times, *amount]
    else:
        part = amount
    return [Token(LP, "(", amount[0].start, amount[0].start), base, sign, *part,
            Token(RP, ")", base.end, base.end)]  # fmt: skip


def _counts_dozens(out: list[Token], ahead: list[Token]) -> bool:
    if not out or out[-1].kind != NUM:
        return False
    if len(out) > 1 and out[-2].kind == REL:
        return True  # "= 7 dozen": the result, in dozens
    before = []
    for t in reversed(out[:-1]):
        if t.kind in (WORD, BREAK) and t.math.lower() not in ("x", "times"):
            break
        before.append(t)
    # the 12 that converts them is there: "4 dozen eggs * 12 = 48", "12 x 3 dozen = 36"
    return any(t.kind == NUM and t.math == "12" for t in [*ahead, *before])


def _proper_fraction(seg: list[Token]) -> bool:
    """`2/5` and nothing else."""
    if len(seg) != 3 or seg[1].math != "/" or not seg[0].kind == seg[2].kind == NUM:
        return False
    return "." not in seg[0].math + seg[2].math and int(seg[0].math) < int(seg[2].math)


def _num(t: Token | None) -> bool:
    return t is not None and t.kind in (NUM, LP)


def _operand_end(out: list[Token]) -> bool:
    return bool(out) and (out[-1].kind in (NUM, RP) or out[-1].math == "%")


def _computation_before(out: list[Token]) -> bool:
    """Tokens since the last word or break end in an operand and hold an operator, no
    relation: a computation whose value the next words state."""
    if not _operand_end(out):
        return False
    seg = []
    for t in reversed(out):
        if t.kind in (WORD, BREAK):
            break
        seg.append(t)
    # ("7% is ..." states a share, not a computation: `%` alone does not count; nor does a
    # proper fraction alone: "2/5 is equal to 12.8 hectares" is a share of something.)
    if _proper_fraction(seg[::-1]):
        return False
    binary = any(t.kind == OP and t.math != "%" for t in seg)
    return binary and not any(t.kind == REL for t in seg)
