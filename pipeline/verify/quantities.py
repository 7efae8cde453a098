"""The quantities a text states: each number (in digits or words) with its span, its unit and
the words that lead to it in its clause (`One pair of pants costs $22.50` -> 22.50, unit
`dollar`, context `one pair of pants costs`).

Grounding (grounding.py) asks which values a problem and a solution have stated; bindings
(bindings.py) which quantity each value was stated for. One regex pass over the text; the
words are not parsed, only normalized (lower case, a plural `s` dropped from the unit).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from fractions import Fraction

_ONES = (
    "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten",
    "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen",
    "nineteen",
)  # fmt: skip
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50, "sixty": 60, "seventy": 70,
         "eighty": 80, "ninety": 90}  # fmt: skip
_WORD_VALUES: dict[str, tuple[Fraction, ...]] = {w: (Fraction(i),) for i, w in enumerate(_ONES)}
_WORD_VALUES.update({w: (Fraction(v),) for w, v in _TENS.items()})
_WORD_VALUES.update({
    "hundred": (Fraction(100),), "thousand": (Fraction(1000),), "million": (Fraction(10**6),),
    "dozen": (Fraction(12),), "dozens": (Fraction(12),), "pair": (Fraction(2),),
    "pairs": (Fraction(2),), "twice": (Fraction(2),), "double": (Fraction(2),),
    "doubled": (Fraction(2),), "triple": (Fraction(3),), "tripled": (Fraction(3),),
    "thrice": (Fraction(3),), "quadruple": (Fraction(4),), "half": (Fraction(1, 2), Fraction(2)),
    "halves": (Fraction(1, 2), Fraction(2)), "third": (Fraction(1, 3), Fraction(3)),
    "thirds": (Fraction(1, 3), Fraction(3)), "quarter": (Fraction(1, 4), Fraction(4)),
    "quarters": (Fraction(1, 4), Fraction(4)), "fourth": (Fraction(1, 4), Fraction(4)),
    "fourths": (Fraction(1, 4), Fraction(4)), "fifth": (Fraction(1, 5), Fraction(5)),
    "fifths": (Fraction(1, 5), Fraction(5)), "sixth": (Fraction(1, 6), Fraction(6)),
    "tenth": (Fraction(1, 10), Fraction(10)), "tenths": (Fraction(1, 10), Fraction(10)),
    "percent": (Fraction(100),), "decade": (Fraction(10),), "century": (Fraction(100),),
    "weekly": (Fraction(7),), "daily": (Fraction(1),), "hourly": (Fraction(60),),
})  # fmt: skip
# "half", "thirds", "quarter": a fraction (its value, then its denominator).
_FRACTION_WORDS = frozenset(w for w, v in _WORD_VALUES.items() if len(v) == 2)
# Words that imply numbers a solution may use without the problem writing them.
_IMPLIED: dict[str, tuple[int, ...]] = {
    "quarter": (25,), "quarters": (25,), "dime": (10,), "dimes": (10,), "nickel": (5,),
    "nickels": (5,), "penny": (1,), "pennies": (1,), "month": (4, 30, 31), "months": (4, 30, 31),
    "monthly": (4, 30, 31), "weekday": (5,), "weekdays": (5,), "weekend": (2,),
    "weekends": (2,), "feet": (3, 12), "foot": (3, 12), "yard": (3, 36), "yards": (3, 36),
    "gallon": (4, 128), "gallons": (4, 128), "pound": (16,), "pounds": (16,),
    "mile": (5280, 1760), "miles": (5280, 1760), "inch": (12,), "inches": (12,),
    "square": (4,), "squares": (4,), "rectangle": (4,), "triangle": (3,), "triangles": (3,),
    "pentagon": (5,), "hexagon": (6,), "octagon": (8,), "cube": (6, 3), "dice": (6,),
    "die": (6,),
}  # fmt: skip
for _word, _values in _IMPLIED.items():
    _WORD_VALUES[_word] = (*_WORD_VALUES.get(_word, ()), *map(Fraction, _values))

_QUANTITY = re.compile(
    r"""
    (?P<num>(?<![\w.])(?:(?<=\$)\d{1,3}(?:\ \d{3})+(?![\d,]|\.\d)
      |\d{1,3}(?:(?:,|\{,\})\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+))
      (?:/(?P<den>\d+)(?![\d.]))?
      (?P<pct>\s?%|\s+percent\b)?
  | (?P<stop>[.;:!?\n]|,\s|\b(?:and|but|so|then|which)\b)
  | (?P<word>\b[A-Za-z]+(?:-[A-Za-z]+)?\b)
    """,
    re.VERBOSE,
)
_DOLLAR = re.compile(r"[$€£]\s*$")
# Inline LaTeX math (`$5 \times 5 = 25$`, `$12.5$ cm`): its `$` opens math, it is no currency
# sign. Math closes on a `$` after a character that is not a space and before no digit
# (`$5 + $3 = $8` is money: each `$` there comes before a digit; `$5 and $3`: before a space).
_MATH = re.compile(r"\$(?=[^\s$])[^$\n]*?[^\s$]\$(?!\d)")
MAX_CONTEXT = 6  # words that lead to a number, at most


@dataclass(frozen=True, slots=True)
class Quantity:
    """A number stated in a text: its values (a percentage is also its fraction, `3/4` also its
    terms), span, unit and leading words."""

    values: tuple[Fraction, ...]
    span: tuple[int, int]
    unit: str = ""
    context: tuple[str, ...] = ()


def _digits(text: str) -> Fraction:
    whole, _, frac = text.replace("{,}", "").replace(",", "").replace(" ", "").partition(".")
    value = int(whole or "0") * 10 ** len(frac) + int(frac or "0")
    return Fraction(value, 10 ** len(frac))


@functools.lru_cache(maxsize=1024)  # a checker reads each step twice (check, then accept)
def quantities(text: str, max_chars: int = 20000) -> tuple[Quantity, ...]:
    """Every number of `text` (digits, `3/4`, `20%`, number words), in order."""
    return tuple(_quantities(text, max_chars))


def _math_openers(text: str) -> set[int]:
    """Where a `$` opens inline LaTeX math."""
    return {m.start() for m in _MATH.finditer(text)}


def _quantities(text: str, max_chars: int) -> list[Quantity]:
    out: list[Quantity] = []
    math = _math_openers(text[:max_chars]) if "$" in text else set()
    words: list[str] = []  # the clause so far
    pending: int | None = None  # the quantity whose unit is the next word
    for m in _QUANTITY.finditer(text[:max_chars]):
        if m.group("stop"):
            words, pending = [], None
            continue
        if m.group("word"):
            word = m.group("word").lower()
            if pending is not None:
                if word not in _NOT_UNITS:
                    q = out[pending]
                    out[pending] = Quantity(q.values, q.span, _unit(word, q.unit), q.context)
                pending = None
            if word in _WORD_VALUES or _compound(word):
                values = _WORD_VALUES.get(word) or _compound(word)
                out.append(Quantity(values, m.span(), "", tuple(words[-MAX_CONTEXT:])))
                pending = len(out) - 1
            words.append(word)
            continue
        num, den, pct = m.group("num"), m.group("den"), m.group("pct")
        if len(num) > 40:
            continue
        value = _digits(num)
        values: list[Fraction] = [value]
        if den is not None and int(den) != 0 and len(den) < 20:
            values = [value / int(den), value, Fraction(int(den))]
        if pct:
            values.append(value / 100)
        sign = _DOLLAR.search(text[max(0, m.start() - 2) : m.start()])
        unit = "dollar" if sign and max(0, m.start() - 2) + sign.start() not in math else ""
        if pct:
            unit = "percent"
        out.append(Quantity(tuple(values), m.span(), unit, tuple(words[-MAX_CONTEXT:])))
        pending = len(out) - 1 if not unit or unit == "dollar" else None
        words.append("#")  # the number's place: a later number's context includes it
    return out


def cardinal(word: str) -> int | None:
    """A number written as a cardinal word (`three` -> 3, `twenty-five` -> 25), else None."""
    word = word.lower()
    if word in _TENS:
        return _TENS[word]
    if word in _ONES:
        return _ONES.index(word)
    a, _, b = word.partition("-")
    return _TENS[a] + _ONES.index(b) if a in _TENS and b in _ONES[1:10] else None


def _compound(word: str) -> tuple[Fraction, ...]:
    """`twenty-five` -> 25, `two-thirds` -> 2/3 (and its terms)."""
    if "-" not in word:
        return ()
    a, _, b = word.partition("-")
    if a in _TENS and b in _ONES[1:10]:
        return (Fraction(_TENS[a] + _ONES.index(b)),)
    if a in _ONES[1:10] and b in _FRACTION_WORDS:  # "three-quarters", "one-quarter"
        n, d = Fraction(_ONES.index(a)), _WORD_VALUES[b][1]
        return (n / d, n, d)
    return ()


def _unit(word: str, before: str) -> str:
    """The unit a word names, singular (`dollars` -> `dollar`); a currency sign wins."""
    if before:
        return before
    if word.endswith("ies") and len(word) > 4:
        return word[:-3] + "y"
    if word.endswith(("ches", "shes", "sses", "xes")):
        return word[:-2]
    if word.endswith("s") and not word.endswith("ss") and len(word) > 3:
        return word[:-1]
    return word


# Words after a number that are not its unit ("3 of them", "5 more", "20 each").
_NOT_UNITS = frozenset(
    "of more less fewer each per and or to in on at for from with by than times is are was were "  # noqa: SIM905
    "the a an it its this that these those as so if but then which who what when where".split()
)
