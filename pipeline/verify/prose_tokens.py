"""Reasoning text as tokens for the claim finder: prose, LaTeX, markdown, units, traps.

Real models write arithmetic inside sentences (`So 12 × 7 = 84 apples.`), in LaTeX
(`$\\frac{3}{4} \\times 20 = 15$`), in markdown lists (`- 2 + 3 = 5`, `**Step 2:**`) and between
think markers. `tokenize` reads such text in one regex pass into typed tokens that keep their
span in the source, and `rewrite` settles what each token means from its neighbours: `x`
between numbers is a times sign, a word right after a number is a unit, `- ` at a line start
is a bullet, `10-20` after "pages" is a range. What is not arithmetic (dates, clock times,
ratios, versions, scores, ranges, `≈`, "approximately", remainders) becomes NONARITH, so a
relation touching it is never judged; what is arithmetic we do not evaluate (`\\sqrt`, `5!`,
`π`, other scripts' digits) becomes UNSUP, so its relation is unreadable, never judged either.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

# Token kinds.
NUM, VAR, OP, REL, APPROX, LP, RP = "num", "var", "op", "rel", "approx", "lp", "rp"
WORD, BREAK, NONARITH, UNSUP, NEWLINE, APPROX_WORD, SKIP = (
    "word", "break", "nonarith", "unsup", "newline", "approx_word", "skip"
)  # fmt: skip
OPERAND_END = (NUM, VAR, RP)
OPERAND_START = (NUM, VAR, LP)


@dataclass(slots=True)
class Token:
    kind: str
    math: str  # what the grammar reads ("*" for "\\times"); the source for words
    start: int
    end: int
    star: bool = False  # an ASCII "*" or "**": multiplication, or markdown emphasis
    unit: str = ""  # a number's unit, when one was dropped after it ("4.2 GB = ...")
    name: str = ""  # a VAR that stands for a named quantity's words ("number of novels")
    dollars: bool = False  # a number written after "$" ("$1 / 2 = 50 cents": dollars, cents)


_TOKEN = re.compile(
    r"""
    (?P<code>```.*?(?:```|\Z)|`[^`\n]*`)
  | (?P<tag></?[A-Za-z][A-Za-z0-9_-]*>)
  | (?P<date>\d{4}-\d{1,2}-\d{1,2}(?!\d)|\d{1,2}/\d{1,2}/\d{2,4}(?!\d))
  | (?P<dotted>\d+(?:\.\d+){2,})
  | (?P<clock>\d{1,2}:\d{2}(?::\d{2})?|\d+:\d+)
  | (?P<ellipsis>\d+(?:\.\d+)?(?:\.\.\.|…))
  | (?P<factorial>\d+!(?!=))
  | (?P<sup>[⁰¹²³⁴⁵⁶⁷⁸⁹]+)
  | (?P<num>\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?(?![\d,]\d)|\d+(?:\.\d+)?|\.\d+)
  | (?P<latex>\\[A-Za-z]+|\\.)
  | (?P<rel><=|>=|!=|==|=>|->|:=|[=<>≤≥≠≈~→⇒≅≃])
  | (?P<op>\*\*|[-+*/^%×÷−·⋅–—])
  | (?P<lp>[(\[{])
  | (?P<rp>[)\]}])
  | (?P<word>[A-Za-z]+(?:-[A-Za-z]{2,})+|[A-Za-z]+(?:'[A-Za-z]+)?)
  | (?P<newline>\n)
  | (?P<space>[ \t\r\f\v$€£¥&]+)
  | (?P<other>.)
    """,
    re.VERBOSE | re.DOTALL | re.ASCII,  # ASCII: `\d` is [0-9]; other scripts' digits are UNSUP
)

_SUPERSCRIPTS = str.maketrans("⁰¹²³⁴⁵⁶⁷⁸⁹", "0123456789")
_REL = {"<=": "<=", ">=": ">=", "!=": "!=", "==": "=", "=": "=", "<": "<", ">": ">",
        "≤": "<=", "≥": ">=", "≠": "!="}  # fmt: skip
_APPROX_REL = {"≈", "~", "≅", "≃"}
_ARROWS = {"=>", "->", "→", "⇒", ":="}
_OP = {"**": "^", "+": "+", "-": "-", "−": "-", "*": "*", "×": "*", "·": "*", "⋅": "*",
       "/": "/", "÷": "/", "^": "^", "%": "%"}  # fmt: skip

_LATEX_OP = {"times": "*", "cdot": "*", "ast": "*", "div": "/"}
_LATEX_REL = {"neq": "!=", "ne": "!=", "leq": "<=", "le": "<=", "leqslant": "<=",
              "geq": ">=", "ge": ">=", "geqslant": ">=", "lt": "<", "gt": ">"}  # fmt: skip
_LATEX_APPROX = {"approx", "sim", "simeq", "cong", "equiv", "propto"}
_LATEX_BREAK = {"Rightarrow", "implies", "to", "rightarrow", "Longrightarrow", "iff",
                "therefore", "because", "Leftrightarrow", "quad", "qquad"}  # fmt: skip
_LATEX_SKIP = {"left", "right", "big", "Big", "bigg", "Bigg", "bigl", "bigr", "Bigl", "Bigr",
               "middle", "displaystyle", "textstyle", "limits", "boxed", "fbox"}  # fmt: skip
_LATEX_TEXT = {"text", "mathrm", "textbf", "mathbf", "textit", "mathit", "textrm", "mbox",
               "operatorname", "textsf", "mathsf", "emph", "unit", "mathtt", "texttt"}  # fmt: skip
_LATEX_ELLIPSIS = {"cdots", "ldots", "dots", "dotsc", "dotsb", "vdots"}
_FRACS = {"frac", "dfrac", "tfrac", "cfrac"}

# Words that turn the arithmetic they stand beside into something else.
_APPROX_WORDS = {"approximately", "approx", "about", "around", "roughly", "nearly", "almost",
                 "circa", "estimated", "estimate", "approximate", "rounded", "rounding",
                 "roughy", "ish"}  # fmt: skip
_RANGE_BEFORE = {"page", "pages", "pp", "chapter", "chapters", "section", "sections", "line",
                 "lines", "verse", "verses", "year", "years", "age", "ages", "aged", "from",
                 "between", "score", "scored", "won", "lost", "beat", "drew", "record", "ratio",
                 "vote", "votes", "ranging", "range", "round", "rounds", "game", "games",
                 "step", "steps", "items", "questions", "problems", "exercises", "grades",
                 "grade", "room", "rooms", "seats", "finished", "ended", "went",
                 "lead", "leading", "trailing", "final", "halftime"}  # fmt: skip
_RANGE_AFTER = {"win", "victory", "loss", "defeat", "lead", "draw", "tie", "record", "split",
                "vote", "majority", "score", "scoreline", "result"}  # fmt: skip
_VERSION_WORDS = {"version", "versions", "python", "release", "java", "node", "ios", "android",
                  "windows", "macos", "ubuntu", "gcc", "rust", "php", "ruby", "perl",
                  "kernel", "firefox", "chrome", "v", "ver", "api", "sdk", "cuda", "torch",
                  "numpy", "django", "debian", "fedora", "openssl"}  # fmt: skip
_REMAINDER = {"remainder", "rem", "r", "R", "remainders"}
# word -> operator, when the word stands between two operands ("5 plus 3 = 8").
WORD_OPS = {"plus": "+", "minus": "-", "times": "*"}
# An unmapped connector right before a relation means its left side was cut by a word:
# "4 per item times 3 = 12" must not be read as "3 = 12".
CONNECTORS = {"plus", "minus", "times", "multiplied", "divided", "by", "of", "over", "than",
              "less", "more", "per", "add", "added", "subtract", "subtracted", "from", "and",
              "with", "into", "each", "sum", "product", "difference", "quotient",
              "twice", "double", "half", "triple", "thrice"}  # fmt: skip


def _other_kind(ch: str) -> str:
    cat = unicodedata.category(ch)
    # Other scripts' digits, fractions, superscripts, math symbols we do not read (√ ∑ ± π):
    # a relation touching them is unreadable, never judged on what is left of it.
    if cat[0] == "N" or cat == "Sm" or ch in "πθ√∞±∓":
        return UNSUP
    if cat[0] == "L":
        return UNSUP if unicodedata.name(ch, "").startswith("GREEK") else WORD
    return BREAK


def tokenize(text: str, max_digits: int) -> list[Token]:
    """One regex pass; spans index `text`. Numbers over `max_digits` are UNSUP (reason: limit)."""
    out: list[Token] = []
    add = out.append
    for m in _TOKEN.finditer(text):
        kind, s, e = m.lastgroup, m.start(), m.end()
        v = m.group()
        if kind == "space":
            continue
        if kind == "num":
            digits = v.replace("{,}", "").replace(",", "")  # "1,200", LaTeX's "1{,}200"
            if len(digits) > 1 and digits[0] == "0" and "." not in digits:
                add(Token(NONARITH, v, s, e))  # "0130 hours", "007": a code or a clock time
            elif len(digits) - ("." in digits) > max_digits:
                add(Token(UNSUP, "limit", s, e))
            else:
                add(Token(NUM, digits, s, e, dollars=s > 0 and text[s - 1] == "$"))
        elif kind == "word":
            add(Token(VAR if len(v) == 1 else WORD, v, s, e))
        elif kind == "sup":  # "10²" is 10^2 (and "m²" a unit: see _units_and_letters)
            add(Token(OP, "^", s, s))
            add(Token(NUM, v.translate(_SUPERSCRIPTS), s, e))
        elif kind == "op":
            if v in "–—":  # dashes: a range between numbers, else punctuation
                add(Token(OP if v == "–" else BREAK, v, s, e))
            else:
                add(Token(OP, _OP[v], s, e, star=v in ("*", "**")))
        elif kind == "rel":
            if v in _ARROWS:
                add(Token(BREAK, v, s, e))
            elif v in _APPROX_REL:
                add(Token(APPROX, v, s, e))
            else:
                add(Token(REL, _REL[v], s, e))
        elif kind == "lp":
            add(Token(LP, "{" if v == "{" else "(", s, e))  # braces: settled in _braces
        elif kind == "rp":
            add(Token(RP, "}" if v == "}" else ")", s, e))
        elif kind == "latex":
            _latex(v, s, e, add)
        elif kind == "newline":
            add(Token(NEWLINE, "", s, e))
        elif kind in ("date", "dotted", "clock", "ellipsis"):
            add(Token(NONARITH, v, s, e))
        elif kind == "factorial":
            add(Token(UNSUP, "factorial", s, e))
        elif kind in ("code", "tag"):
            add(Token(BREAK, "", s, e))
        else:
            add(Token(_other_kind(v), v, s, e))
    return out


def _latex(v: str, s: int, e: int, add) -> None:
    name = v[1:]
    if name in _LATEX_OP:
        add(Token(OP, _LATEX_OP[name], s, e))
    elif name in _LATEX_REL:
        add(Token(REL, _LATEX_REL[name], s, e))
    elif name in _LATEX_APPROX:
        add(Token(APPROX, v, s, e))
    elif name in _FRACS:
        add(Token(LP, "\\frac", s, e))  # settled in _braces: \frac{a}{b} -> ((a)/(b))
    elif name in _LATEX_TEXT:
        add(Token(SKIP, "\\text", s, e))  # its group's braces are dropped in _braces
    elif name in _LATEX_SKIP or name in (",", ";", ":", "!", " ", "(", ")", "[", "]", "$"):
        return
    elif name in _LATEX_BREAK or name == "\\":
        add(Token(BREAK, v, s, e))
    elif name == "%":
        add(Token(OP, "%", s, e))
    elif name == "{":
        add(Token(LP, "(", s, e))
    elif name == "}":
        add(Token(RP, ")", s, e))
    elif name in _LATEX_ELLIPSIS:
        add(Token(NONARITH, v, s, e))
    else:  # \sqrt, \pi, \log, \binom, ...: mathematics we do not evaluate
        add(Token(UNSUP, v, s, e))
