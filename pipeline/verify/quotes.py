"""The problem quoted wrong: a step that restates a sentence of the problem word for word but
for one number (`which he can sell for $1.` where the problem says `$1.5 each`) or one word
that reverses what the sentence says (`2 more jewels than Aaron` for `2 fewer`, `as long as the
second time` for `the first time`). Reasoning models restate the problem before they work on
it; a misquote there carries into every step after, and no check of the arithmetic sees it.

A step sentence is read as a quote when it matches one sentence of the problem in at least
`MIN_MATCHED` tokens, covering most of both (numbers match numbers whatever their values,
`three` and `3` alike). In a quote, a number of the step is judged against the problem's
number at the same place: the two words before it must match, and the words after it too, or
the step's sentence ends there (`... sell for $1.`: the rest cut off). It errs toward silence:
a value the problem states anywhere with the same two words before it, a percentage read as
its fraction (`20%` and `0.2`), or a step sentence that matches two problem sentences equally
well is never judged. A swapped word is judged only when it is the one difference at its place
and both words are of one small set of opposites (more / fewer / less, first / second ...) or
of parts a problem tells apart (morning / afternoon, Monday / Tuesday, boys / girls).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from difflib import SequenceMatcher
from fractions import Fraction

from pipeline.verify.quantities import cardinal
from pipeline.verify.verdicts import number_text

MIN_MATCHED = 8  # tokens a step sentence shares with a problem sentence to be its quote
MIN_SHORT = 6  # ... or, matching most of a short problem sentence, this many
MIN_SHARE = 0.75  # of each sentence's tokens, matched
# A quote of six tokens with one word changed in its middle keeps two runs of three.
MIN_SHARED_TRIGRAMS = 2
MAX_SENTENCE_TOKENS = 120  # longer runs of text are no sentence a step quotes
_NUM = "#"  # what every number is while sentences are aligned

_TOKEN = re.compile(
    r"(?P<num>(?<![\w.])(?:\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)(?![\d]))"
    r"|(?P<word>[A-Za-z]+(?:[-'][A-Za-z]+)*)|(?P<sign>%)"
)
# A sentence ends at . ! ? (not a decimal point), a colon or a line break (`the problem says:`).
_SENTENCE = re.compile(r"[.!?:](?:\*\*)?(?=\s|$)|\n")  # `**Restating:**` ends one too
# A sentence that says how things stand after something happened (`Now Tom has 8 apples in his
# basket`) or computes is no quote, however many words it shares with the problem.
_CHANGE = frozenset(
    "now left after then so therefore thus total altogether remaining remain remains rest "  # noqa: SIM905
    "new still finally answer result means gives get gets got becomes become will would "
    "if suppose assume assuming".split()
)
# (`3/4 of the melons` is a fraction the problem may state, `296 / 8` divides; `**` is bold.)
_COMPUTES = re.compile(r"[=+×÷<>^]|(?<!\*)\*(?!\*)|\s/\s|\\(?:times|cdot|div|frac)|\d\s*[x-]\s*\d")
# Words that say the opposite of each other in a sentence a step quotes; a swap within one set
# changes what the problem says.
_OPPOSITES = (
    frozenset({"more", "fewer", "less"}),
    frozenset({"older", "younger"}),
    frozenset({"faster", "slower"}),
    frozenset({"taller", "shorter"}),
    frozenset({"longer", "shorter"}),
    frozenset({"heavier", "lighter"}),
    frozenset({"higher", "lower"}),
    frozenset({"larger", "smaller"}),
    frozenset({"bigger", "smaller"}),
    frozenset({"increase", "decrease"}),
    frozenset({"increased", "decreased"}),
    frozenset({"gains", "loses"}),
    frozenset({"gained", "lost"}),
    frozenset({"earns", "spends"}),
    frozenset({"buys", "sells"}),
    frozenset({"bought", "sold"}),
    frozenset({"first", "second", "third", "fourth", "fifth", "last"}),
    # which of the problem's parts a sentence is about: a quote that names another part
    # (`In the morning, she gives her chickens another 25 cups` for the afternoon's 25 cups)
    frozenset({"morning", "afternoon", "evening", "night"}),
    frozenset({"monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"}),
    frozenset({"boys", "girls"}),
    frozenset({"men", "women"}),
    frozenset({"adults", "children", "kids"}),
)


@dataclass(frozen=True, slots=True)
class _Token:
    text: str  # lower case; a number's is `#`
    span: tuple[int, int]
    value: Fraction | None = None
    percent: bool = False  # followed by `%` or `percent`


@dataclass(frozen=True, slots=True)
class Misquote:
    """A place where the step quotes the problem wrong: the step's words and span, the
    problem's words and span, and what differs."""

    text: str
    span: tuple[int, int]
    source_text: str
    source_span: tuple[int, int]
    detail: str


class Quotes:
    """The problem's sentences, to check a step's restatement of them."""

    def __init__(self, problem: str = "") -> None:
        self.problem = problem
        self.trigrams = _trigrams(problem)
        self._read = False
        self.sentences: list[tuple[list[_Token], frozenset[str]]] = []
        # (two words before, value): a value the problem states after those words anywhere.
        self.stated: set[tuple[tuple[str, ...], Fraction]] = set()

    def _read_problem(self) -> None:
        """Tokenized when a step first shares words with it: most jobs never quote it. (Built
        aside, then set: a checker the task queue caches may be read by two threads.)"""
        sentences, stated = [], set()
        for tokens in _sentences(self.problem):
            if len(tokens) >= MIN_SHORT:
                sentences.append((tokens, frozenset(t.text for t in tokens)))
            for i, t in enumerate(tokens):
                if t.value is not None:
                    stated.add((_before(tokens, i), t.value))
        self.sentences, self.stated, self._read = sentences, stated, True

    def misquotes(self, step: str) -> list[Misquote]:
        """Each number or opposite word in `step` that a quote of the problem changes."""
        if len(self.trigrams & _trigrams(step)) < MIN_SHARED_TRIGRAMS:
            return []  # no quote (most steps; cheap)
        if not self._read:
            self._read_problem()
        out: list[Misquote] = []
        for start, end in _spans(step):
            piece = step[start:end]
            if len(self.trigrams & _trigrams(piece)) < MIN_SHARED_TRIGRAMS or _COMPUTES.search(
                piece
            ):
                continue
            mine = _tokens(step, start, end)
            if not MIN_SHORT <= len(mine) <= MAX_SENTENCE_TOKENS:
                continue
            source = self._source(mine)
            if source is not None:
                out.extend(self._differences(step, mine, source))
        return out

    def _source(self, mine: list[_Token]) -> list[_Token] | None:
        """The problem sentence `mine` quotes: the one best matched, if it is matched enough
        and no other is matched as well."""
        keys = tuple(t.text for t in mine)
        scored = []
        for theirs, words in self.sentences:
            if _CHANGE.intersection(keys) - words:
                continue  # the step says what changed: its own words, not the problem's
            if sum(k in words for k in keys) < max(MIN_SHORT, MIN_SHARE * len(mine)):
                continue  # too few of its words in that sentence to match (cheap, first)
            matched = _matcher(tuple(t.text for t in theirs), keys)
            size = sum(b.size for b in matched.get_matching_blocks())
            # Most of the step's sentence matched (a quote may stop short: `... 4 apples that
            # cost $1.`), and it is long, or it is most of a short sentence of the problem.
            long = size >= MIN_MATCHED or size >= MIN_SHARE * len(theirs)
            if size >= MIN_SHORT and size >= MIN_SHARE * len(mine) and long:
                scored.append((size, theirs))
        if not scored:
            return None
        scored.sort(key=lambda s: -s[0])
        if len(scored) > 1 and scored[1][0] == scored[0][0]:
            return None  # two sentences alike: which one is quoted is not known
        return scored[0][1]

    def _differences(self, step: str, mine: list[_Token], theirs: list[_Token]) -> list[Misquote]:
        """The one change a quote makes, if it makes exactly one: a number (every word the
        same) or an opposite word (every number the same). Words the quote leaves off at the
        start or the end of the problem's sentence are no change; any other is, and a sentence
        that changes two things says something of its own (`The last part of the race is 16
        kilometers` in the frame of `The first part of the race is 15.5 kilometers long`)."""
        ops = _matcher(tuple(t.text for t in theirs), tuple(t.text for t in mine)).get_opcodes()
        changed = [
            (n, op) for n, op in enumerate(ops)
            if op[0] != "equal" and not (op[0] == "delete" and n in (0, len(ops) - 1))
        ]  # fmt: skip
        numbers = [
            (a0 + k, b0 + k, k, a1 - a0)
            for op, a0, a1, b0, _ in ops if op == "equal"
            for k in range(a1 - a0) if _differs(theirs[a0 + k], mine[b0 + k])
        ]  # fmt: skip
        if not changed and len(numbers) == 1:
            i, j, k, size = numbers[0]
            # Two matched words before it (or after it, when both sentences start with those
            # words: a quote that starts mid-sentence, `6 packs of tuna fish are sold per hour`
            # from `At peak season, 6 packs ...`, may be another clause's number), and one word
            # after it or the quote ends there.
            whole = i == j == k  # the matched run starts both sentences
            placed = (k >= 2 or whole and k + 2 < size) and (k + 1 < size or j + 1 == len(mine))
            if placed and (_before(mine, j), mine[j].value) not in self.stated:
                return [self._misquote(step, mine, j, theirs, i, "number")]
        elif len(changed) == 1 and not numbers:
            n, (op, a0, a1, b0, b1) = changed[0]
            one = op == "replace" and a1 - a0 == b1 - b0 == 1 and _between(ops, n)
            old, new = (theirs[a0].text, mine[b0].text) if one else ("", "")
            if one and any(old in pair and new in pair for pair in _OPPOSITES):
                return [self._misquote(step, mine, b0, theirs, a0, "word")]
        return []

    def _misquote(
        self, step: str, mine: list[_Token], j: int, theirs: list[_Token], i: int, what: str
    ) -> Misquote:
        lo, hi = max(0, j - 3), min(len(mine), j + 2)
        span = (mine[lo].span[0], mine[hi - 1].span[1])
        src_lo, src_hi = max(0, i - 3), min(len(theirs), i + 2)
        source_span = (theirs[src_lo].span[0], theirs[src_hi - 1].span[1])
        text, source_text = step[span[0] : span[1]], self.problem[source_span[0] : source_span[1]]
        if what == "number":
            said, wrote = number_text(theirs[i].value), number_text(mine[j].value)
        else:
            said, wrote = theirs[i].text, mine[j].text
        detail = f"the problem says {said!s} ({source_text!r}); the step quotes it as {wrote}"
        return Misquote(text, span, source_text, source_span, detail)


def _differs(theirs: _Token, mine: _Token) -> bool:
    a, b = theirs.value, mine.value
    if a is None or b is None or a == b:
        return False
    # `20%` restated as `0.2`, or the other way: one value said two ways.
    return not (theirs.percent or mine.percent) or (a / 100 != b and b / 100 != a)


def _between(ops: list[tuple[str, int, int, int, int]], n: int) -> bool:
    """Opcode n has two matched tokens or more before it and one or more after it."""
    if n == 0 or n + 1 == len(ops):
        return False
    before, after = ops[n - 1], ops[n + 1]
    return before[0] == after[0] == "equal" and before[2] - before[1] >= 2


def _before(tokens: list[_Token], i: int) -> tuple[str, ...]:
    return tuple(t.text for t in tokens[max(0, i - 2) : i])


_GATE_WORD = re.compile(r"[a-z]+|\d[\d,.]*")


@functools.lru_cache(maxsize=1024)
def _trigrams(text: str) -> frozenset[tuple[str, str, str]]:
    words = [w if w[0].isalpha() else _NUM for w in _GATE_WORD.findall(text.lower())]
    return frozenset(zip(words, words[1:], words[2:], strict=False))


@functools.lru_cache(maxsize=4096)
def _matcher(a: tuple[str, ...], b: tuple[str, ...]) -> SequenceMatcher:
    return SequenceMatcher(None, a, b, autojunk=False)


def _spans(text: str) -> list[tuple[int, int]]:
    ends = [m.end() for m in _SENTENCE.finditer(text)]
    return list(zip([0, *ends], [*ends, len(text)], strict=True))


def _sentences(text: str) -> list[list[_Token]]:
    out = [_tokens(text, start, end) for start, end in _spans(text)]
    return [tokens for tokens in out if 0 < len(tokens) <= MAX_SENTENCE_TOKENS]


def _tokens(text: str, start: int, end: int) -> list[_Token]:
    tokens: list[_Token] = []
    for m in _TOKEN.finditer(text, start, end):
        kind, s = m.lastgroup, m.group().lower()
        if kind == "num":
            tokens.append(_Token(_NUM, m.span(), Fraction(s.replace(",", ""))))
        elif s == "%" or s == "percent":
            if tokens and tokens[-1].value is not None:
                last = tokens[-1]
                tokens[-1] = _Token(last.text, last.span, last.value, True)
            tokens.append(_Token("%", m.span()))
        elif kind == "word" and (value := cardinal(s)) is not None:  # three, twenty-five
            tokens.append(_Token(_NUM, m.span(), Fraction(value)))
        else:
            tokens.append(_Token(s, m.span()))
    return tokens
