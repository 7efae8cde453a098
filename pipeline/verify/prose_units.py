"""Units after numbers: which words are a number's unit, and what the units we know measure.

`units_and_letters` settles, over the claim finder's tokens, the words that are a number's unit
(`15 teeth / 30 teeth`, `16 eggs per day * 7 days`, `60 km/hr * 2 hours`, `= 160 minutes`):
inside an expression they are dropped from the arithmetic and kept on the number
(`Token.unit`). `unit_scale` knows the units of time, length, mass, volume and money, each as a
dimension and a scale, so a relation between such quantities in different units
(`1 hour + 30 minutes = 90 minutes`, `75 cents * 4 = 3 dollars`) can also be read with every
quantity in one unit (`converted_texts`). Other words after numbers (`apples`, `teeth`) are
units we do not convert: `5 apples + 3 oranges = 8 fruits` is arithmetic on the numbers.
"""

from __future__ import annotations

from fractions import Fraction

from pipeline.verify.prose_tokens import (
    APPROX,
    APPROX_WORD,
    BREAK,
    LP,
    NUM,
    OP,
    REL,
    RP,
    VAR,
    WORD,
    Token,
)

_VAR_LETTERS = frozenset("xyznabpqk")  # letters that are more often variables than units
# Words that join a sentence, never a unit after a number ("-6 and -6 + 6 = 0").
FUNCTION_WORDS = frozenset(
    "and or but so then thus hence is are was were be to the an which that because since for "  # noqa: SIM905
    "if when while where as at by on in into we you it this these those gives get gets makes "
    "equals yes no not also too now here there than plus minus times of per each with from "
    "over under giving making leaving yields".split()
)
_RATE_WORDS = frozenset({"per", "a", "an", "every"})  # "eggs per day", "$5 an hour"


def units_and_letters(tokens: list[Token]) -> list[Token]:
    """Drop unit words inside expressions (`5 apples + 3 apples`: a word run right after an
    operand, followed by an operator, a relation or a closing parenthesis), note the unit that
    ends a relation's side (`= 160 minutes`, words kept), and read single letters that stand
    among words (`a`, `I`) as words, not variables."""
    out: list[Token] = []
    operands = _operand_letters(tokens)
    i, n = 0, len(tokens)
    while i < n:
        t = tokens[i]
        if is_unit(t) and out and _ends_operand(out[-1]) and out[-1].kind != VAR:
            j = _unit_run_end(tokens, i)
            follow = tokens[j] if j < n else None
            if follow is not None and follow.kind in (OP, REL, RP, APPROX):
                out[-1].unit = _unit_text(tokens[i:j])
                i = j  # a unit: "10 km + 5 km", "3 hours × 60", "16 eggs per day * 7"
                continue
            if out[-1].kind == NUM and _ends_side(out):  # "= 160 minutes": the words stay
                out[-1].unit = _unit_text(tokens[i : _unit_end(tokens, i + 1)])
        if _rate_after(tokens, i, out):
            j = _unit_end(tokens, i + 2)
            if j < n and tokens[j].kind in (OP, REL, RP, APPROX):
                out[-1].unit = _unit_text(tokens[i:j])
                i = j  # "$5 per hour * 8 hours": the rate is the number's unit
                continue
        letter = t.kind == VAR and t.math not in _VAR_LETTERS and t.math not in operands
        if letter and out and out[-1].kind == NUM:
            nxt = tokens[i + 1] if i + 1 < n else None
            if out[-1].end < t.start and (nxt is None or nxt.kind not in (NUM, LP, VAR)):
                j = _unit_end(tokens, i + 1)
                out[-1].unit = _unit_text(tokens[i:j])
                i = j  # "1600 m", "2.5 g", "28 km/h", "14.7 m²"
                continue
        if t.kind == OP and t.math == "/" and out and out[-1].kind == NUM and i + 1 < n:
            rate = tokens[i + 1]  # "€2.35/kg": a price per unit, not a division
            tight = out[-1].end == t.start and rate.start == t.end
            if tight and is_unit(rate) and len(rate.math) > 1:
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


def _rate_after(tokens: list[Token], i: int, out: list[Token]) -> bool:
    """`tokens[i]` starts a rate right after a number with no unit of its own (`$5 per hour`,
    `$12 an hour`, `3 per day`): a rate word, then a unit word."""
    t = tokens[i]
    if t.kind not in (WORD, VAR) or t.math.lower() not in _RATE_WORDS or i + 1 >= len(tokens):
        return False
    if not out or out[-1].kind != NUM or out[-1].unit or not is_unit(tokens[i + 1]):
        return False
    # "a" and "an" make a rate of a price only: `1/2 a cup` is half a cup
    return out[-1].dollars or t.math.lower() in ("per", "every")


def _operand_letters(tokens: list[Token]) -> set[str]:
    """Letters an operator touches somewhere in the text: variables (`4*W × W = 4 W^2`), never
    a unit after a number (`1 M&M = 36 M&Ms` keeps its unit)."""
    out = set()
    for i, t in enumerate(tokens):
        if t.kind != VAR:
            continue
        near = [tokens[j] for j in (i - 1, i + 1) if 0 <= j < len(tokens)]
        if any(x.kind == OP and x.math in "+-*" for x in near):  # not "/", "^": "km/h", "m²"
            out.add(t.math)
    return out


def is_unit(t: Token) -> bool:
    return t.kind == WORD and t.math.lower() not in FUNCTION_WORDS


def _unit_run_end(tokens: list[Token], i: int) -> int:
    """The end of the unit that starts at `tokens[i]`: up to three words with their tails,
    what they are of (`cup of dog food`), and a rate (`per day`, `an hour`)."""
    n = len(tokens)
    j = _unit_end(tokens, i + 1)
    while j < n and j - i < 3 and is_unit(tokens[j]):
        j = _unit_end(tokens, j + 1)
    if j + 1 < n and tokens[j].math.lower() == "of" and is_unit(tokens[j + 1]):
        j += 2
        while j < n and j - i < 6 and is_unit(tokens[j]):
            j += 1
    if j + 1 < n and tokens[j].math.lower() in _RATE_WORDS and is_unit(tokens[j + 1]):
        j = _unit_end(tokens, j + 2)  # "16 eggs per day", "$5 an hour"
    return j


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


def _unit_text(tokens: list[Token]) -> str:
    text = ""
    for k, t in enumerate(tokens):
        glue = "" if k == 0 or tokens[k - 1].end == t.start else " "
        text += glue + t.math
    return text


def _ends_operand(t: Token) -> bool:
    return t.kind in (NUM, RP, VAR) or (t.kind == OP and t.math == "%")


def _ends_side(out: list[Token]) -> bool:
    """The number just read ends a relation's side (`... = 160`): a relation or an operator
    before it, since the last break or word."""
    for t in reversed(out[:-1]):
        if t.kind in (REL, OP):
            return True
        if t.kind in (WORD, BREAK, APPROX_WORD):
            return False
    return False


def _wordish(t: Token | None) -> bool:
    return t is None or t.kind in (WORD, BREAK, APPROX_WORD)


# ---- the units we know -----------------------------------------------------------------------

# name -> (dimension, scale in the dimension's base unit). US customary for gallons and the like.
_UNITS: dict[str, tuple[str, Fraction]] = {}
for _names, _dim, _scale in (
    ("s sec secs second seconds", "time", 1),
    ("min mins minute minutes", "time", 60),
    ("h hr hrs hour hours", "time", 3600),
    ("day days", "time", 86400),
    ("week weeks", "time", 604800),
    ("mm millimeter millimeters millimetre millimetres", "length", 1),
    ("cm centimeter centimeters centimetre centimetres", "length", 10),
    ("m meter meters metre metres", "length", 1000),
    ("km kilometer kilometers kilometre kilometres", "length", 1_000_000),
    ("in inch inches", "length", Fraction(254, 10)),
    ("ft foot feet", "length", Fraction(3048, 10)),
    ("yd yard yards", "length", Fraction(9144, 10)),
    ("mi mile miles", "length", 1_609_344),
    ("mg milligram milligrams", "mass", 1),
    ("g gram grams", "mass", 1000),
    ("kg kilogram kilograms", "mass", 1_000_000),
    ("lb lbs pound pounds", "mass", Fraction(45_359_237, 100)),
    ("oz ounce ounces", "mass", Fraction(28_349_523_125, 1_000_000)),
    ("ml milliliter milliliters millilitre millilitres", "volume", 1),
    ("l liter liters litre litres", "volume", 1000),
    ("gal gallon gallons", "volume", Fraction(3_785_411_784, 1_000_000)),
    ("qt quart quarts", "volume", Fraction(946_352_946, 1_000_000)),
    ("pt pint pints", "volume", Fraction(473_176_473, 1_000_000)),
    ("cent cents", "money", 1),
    ("dollar dollars", "money", 100),
):
    for _name in _names.split():
        _UNITS[_name] = (_dim, Fraction(_scale))


def unit_scale(unit: str) -> tuple[str, Fraction] | None:
    """(dimension, scale) of a unit we know (`minutes`, `km`, `pounds`); None otherwise
    (`apples`, `km/h`, `eggs per day`: nothing to convert)."""
    return _UNITS.get(unit.strip().lower()) if unit and " " not in unit.strip() else None


def converted_texts(sides: list[list[Token]]) -> list[str] | None:
    """Each side's arithmetic with every quantity in its dimension's base unit, when a relation
    mixes units of one dimension at different scales (`1 hour + 30 minutes = 90 minutes`, `$1 /
    2 = 50 cents`); None when there is nothing to convert, or units of another kind are mixed
    in. (A number after `$` counts as dollars here only: in LaTeX `$` opens math.)"""
    scales = set()
    dims = set()
    for side in sides:
        for t in side:
            if t.kind != NUM or not (t.unit or t.dollars):
                continue
            known = unit_scale(t.unit or "dollars")
            if known is None:
                return None
            dims.add(known[0])
            scales.add(known[1])
    if len(dims) != 1 or len(scales) < 2:
        return None
    texts = []
    for side in sides:
        last = side[-1] if side else None
        if len(side) > 2 and last.kind == NUM and last.unit and side[-2].math == "/":
            # "42/60 hours": the unit after a fraction is the whole fraction's
            scale = unit_scale(last.unit)
            if scale is not None:
                whole = " ".join(t.math for t in side)
                texts.append(f"(({whole}) * {scale[1].numerator} / {scale[1].denominator})")
                continue
        parts = []
        for t in side:
            money = t.kind == NUM and (t.unit or t.dollars)
            known = unit_scale(t.unit or "dollars") if money else None
            if known is None:
                parts.append(t.math)
            else:
                s = known[1]
                parts.append(f"({t.math} * {s.numerator} / {s.denominator})")
        texts.append(" ".join(parts))
    return texts


# ---- dimensions ---------------------------------------------------------------------------------

Dimension = dict[str, int]  # base dimension -> power ({} : a plain number)
_RATES = {"mph": {"length": 1, "time": -1}, "kph": {"length": 1, "time": -1}}
_PER = frozenset({"per", "a", "an", "every"})


def _unit_dimension(unit: str) -> Dimension | None:
    """`km` {length: 1}; `km/h`, `miles per hour` {length: 1, time: -1}; None: a unit we do not
    know (`apples`), whose dimension cannot be told."""
    unit = unit.strip().lower()
    if unit in _RATES:
        return dict(_RATES[unit])
    words = unit.replace("/", " / ").split()
    if len(words) == 3 and (words[1] == "/" or words[1] in _PER):
        top, bottom = unit_scale(words[0]), unit_scale(words[2])
        if top is None or bottom is None:
            return None
        out: Dimension = {top[0]: 1}
        out[bottom[0]] = out.get(bottom[0], 0) - 1
        return {k: v for k, v in out.items() if v}
    known = unit_scale(unit)
    return None if known is None else {known[0]: 1}


def _token_dimension(t: Token) -> Dimension | None:
    if t.unit in ("", "%", "percent"):
        return {"money": 1} if t.dollars else {}
    words = t.unit.lower().split()
    if t.dollars and len(words) == 2 and words[0] in _PER:  # "$5 an hour"
        time = unit_scale(words[1])
        return None if time is None else {"money": 1, time[0]: -1}
    if t.dollars:
        return None  # "$5 apples": a unit beside the currency we cannot read
    return _unit_dimension(t.unit)


def side_dimension(side: list[Token]) -> Dimension | None:
    """The dimension of a flat arithmetic side (numbers with units, `+ - * /`); None when it
    cannot be told: a unit we do not know, parentheses or letters, or terms of a sum whose
    dimensions differ."""
    terms = _term_dimensions(side)
    if terms is None:
        return None
    measured = [d for d in terms if d]
    if any(d != measured[0] for d in measured[1:]):
        return None
    return measured[0] if measured else {}


def _term_dimensions(side: list[Token]) -> list[Dimension] | None:
    """The dimension of each term of a flat sum; None when one cannot be told."""
    terms: list[Dimension] = []
    current: Dimension = {}
    power = 1
    for t in side:
        if t.kind == NUM:
            d = _token_dimension(t)
            if d is None:
                return None
            for k, v in d.items():
                current[k] = current.get(k, 0) + power * v
            power = 1
        elif t.kind == OP and t.math in ("*", "×", "·"):
            power = 1
        elif t.kind == OP and t.math in ("/", "÷"):
            power = -1
        elif t.kind == OP and t.math in ("+", "-"):
            terms.append(current)
            current, power = {}, 1
        elif not (t.kind == OP and t.math == "%"):
            return None
    terms.append(current)
    return [{k: v for k, v in d.items() if v} for d in terms]


def unlike_terms(side: list[Token]) -> str:
    """Why a side adds quantities that measure different things, or "": two measured terms
    in no dimension alike (`5 km + 3 hours`). Terms that share one pass, written loosely as they
    often are (`3 hours * $10 + $5`)."""
    measured = [d for d in _term_dimensions(side) or () if d]
    for k, a in enumerate(measured):
        b = next((b for b in measured[k + 1 :] if not set(a) & set(b)), None)
        if b is not None:
            return f"{_describe(a)} added to {_describe(b)}"
    return ""


def dimension_mismatch(left: list[Token], right: list[Token]) -> str:
    """Why `left = right` cannot hold for its units, or "": a side that adds unlike quantities
    (`5 km + 3 hours`), or both sides measured, and in no
    dimension alike (`60 km/hr * 2 hours = 120 minutes`: a length is not a time). Sides that
    share a dimension pass, written loosely as they often are (`3 hours * $10 = $30`, a rate
    left implicit), and so does a side without units."""
    unlike = unlike_terms(left) or unlike_terms(right)
    if unlike:
        return unlike
    a, b = side_dimension(left), side_dimension(right)
    if not a or not b or set(a) & set(b):
        return ""
    return f"{_describe(a)} on the left, {_describe(b)} on the right"


def _describe(d: Dimension) -> str:
    return " * ".join(k if v == 1 else f"{k}^{v}" for k, v in sorted(d.items()))
