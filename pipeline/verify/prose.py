"""Claims inside real reasoning text: every arithmetic relation a step states, with its span.

`find_claims(step)` reads what models write — sentences, LaTeX, markdown lists, GSM8K
`<<a*b=c>>` annotations, think markers — and returns one `FoundClaim` per relation pair it
finds: a parsed `Relation` (the grammar of `claims.py`: exact rationals, nothing eval-ed), or,
for a piece it cannot read, the reason (`unparseable`, `unsupported`, `limit`). An unreadable
piece is unknown on its own; it never makes the rest of its step unknown. The words around a
relation are ignored; relations that touch what is not arithmetic (dates, clock times,
versions, scores, ranges, `≈`, "approximately", remainders: see `prose_tokens.py`) are not
claims at all, so they can never be contradicted.

Two guards keep words from cutting a relation short: a relation whose left side follows a
connector word that joined it to an earlier operand (`4 per item times 3 = 12`) is skipped,
and so is an equation between two bare numbers (`3 = 12`), which is what such a cut leaves.
"""

from __future__ import annotations

import functools
import re
from dataclasses import replace

from pipeline.verify.claim_ast import Expr, expr_variables
from pipeline.verify.claims import (
    DEFAULT_LIMITS,
    ClaimLimits,
    Num,
    Relation,
    question_premise,
    variables,
)
from pipeline.verify.found_claim import (  # re-exported: the finder's public names
    LIMIT,
    UNPARSEABLE,
    UNSUPPORTED,
    FoundClaim,
    relations,
)
from pipeline.verify.prose_answers import bare_answers
from pipeline.verify.prose_rewrite import rewrite
from pipeline.verify.prose_sides import (
    converted_relation,
    is_conversion,
    names_of,
    read_chain,
    read_side,
    renamed,
    trim_close,
    trim_open,
)
from pipeline.verify.prose_tokens import (
    APPROX,
    APPROX_WORD,
    BREAK,
    CONNECTORS,
    LP,
    NONARITH,
    NUM,
    OP,
    REL,
    RP,
    VAR,
    WORD,
    Token,
    tokenize,
)
from pipeline.verify.prose_units import dimension_mismatch

__all__ = ["LIMIT", "UNPARSEABLE", "UNSUPPORTED", "FoundClaim", "find_claims", "relations"]

_GSM = re.compile(r"<<(.*?)>>")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
# A relation said in words (prose_words.py): only such lines are tokenized without a symbol.
_SAID = re.compile(
    r"\b(?:is|equals?|makes|gives|leaves|yields|totals|are|was|were|comes|gets?)\s+(?:equal\s+"
    r"to\s+|exactly\s+)?[$(]?[0-9]",
    re.IGNORECASE,
)


def find_claims(
    step: str, limits: ClaimLimits = DEFAULT_LIMITS, answer_var: str | None = None
) -> tuple[FoundClaim, ...]:
    """The claims of one step, in order of appearance; never raises.

    `answer_var` turns a bare final answer (`Answer: 5`, `The answer is 5.`, `#### 5`,
    `\\boxed{5}`) into the claim `answer_var = 5`; without it a bare answer is no claim.
    """
    if len(step) > limits.max_step_chars:
        detail = f"step longer than {limits.max_step_chars} characters"
        return (FoundClaim(step[:60], (0, len(step)), None, LIMIT, detail),)
    try:
        return _find(step, limits, answer_var)
    except Exception as e:  # noqa: BLE001 - free text must never break a check
        return (FoundClaim(step[:60], (0, len(step)), None, UNPARSEABLE, repr(e)[:120]),)


@functools.lru_cache(maxsize=2048)  # a checker reads each step twice (check, then accept)
def _find(step: str, limits: ClaimLimits, answer_var: str | None) -> tuple[FoundClaim, ...]:
    found: list[FoundClaim] = []
    offset = 0
    if "```" in step:  # code is not a claim (`x = x + 1`); blanked, offsets kept
        step = _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), step)
    for line in step.splitlines(keepends=True):
        if "<<" in line:  # GSM8K: the annotations are the claims; the rest repeats them
            found += _gsm_line(step, line, offset, limits)
        else:
            found += _claims_in(step, offset, offset + len(line), limits)
        offset += len(line)
    if answer_var is not None:
        found += bare_answers(step, limits, answer_var, found)
    found.sort(key=lambda c: c.span)
    found = _mark_alternatives(step, found)
    if len(found) > limits.max_claims:
        cut = found[limits.max_claims]
        detail = f"more than {limits.max_claims} claims in a step"
        found = [*found[: limits.max_claims], FoundClaim(cut.text, cut.span, None, LIMIT, detail)]
    readable = [c.relation for c in found if c.relation is not None]
    if len(variables(readable)) > limits.max_vars:
        detail = f"more than {limits.max_vars} variables in a step"
        return (FoundClaim(step[:60], (0, len(step)), None, LIMIT, detail),)
    return tuple(found)


_OR = re.compile(r"\bor\b|\\lor\b|∨", re.IGNORECASE)
# A claim that is tried, not stated: "Check x = 3:", "If x = 4, ...", "Suppose y = 2".
_HYPOTHESIS = re.compile(
    r"\b(?:if|suppose|supposing|assume|assuming|check|checking|try|trying|test|testing|"
    r"substitut\w*|plug\w*|whether|guess)\b[^.;:!?\n]*$",
    re.IGNORECASE,
)


_THEN = re.compile(r"^[^.;!?\n]*\bthen\b[^.;!?\n]*$", re.IGNORECASE)


def _mark_alternatives(step: str, found: list[FoundClaim]) -> list[FoundClaim]:
    """Claims joined by "or" are alternatives, and claims being tried are hypotheses: checked
    on their own, neither is asserted."""
    marked = [False] * len(found)
    for i in range(len(found) - 1):
        if _OR.search(step[found[i].span[1] : found[i + 1].span[0]]):
            marked[i] = marked[i + 1] = True
    for i, c in enumerate(found):
        before = step[found[i - 1].span[1] if i else 0 : c.span[0]]
        if c.relation is not None and variables([c.relation]) and _HYPOTHESIS.search(before):
            marked[i] = True
        elif i and marked[i - 1] and _THEN.search(before):
            marked[i] = True  # "if 100 + 100x = 120 then x = .2": what the supposition gives
    if not any(marked):
        return found
    return [replace(c, alternative=m) if m else c for c, m in zip(found, marked, strict=True)]


def _gsm_line(step: str, line: str, offset: int, limits: ClaimLimits) -> list[FoundClaim]:
    spans = list(_GSM.finditer(line))
    if not spans:
        start = offset + line.index("<<")
        text = line.strip()[:60]
        return [FoundClaim(text, (start, offset + len(line.rstrip())), None, UNPARSEABLE,
                           "unterminated <<...>>")]  # fmt: skip
    out: list[FoundClaim] = []
    for m in spans:
        out += _claims_in(step, offset + m.start(1), offset + m.end(1), limits)
    return out


# ---- windows, segments, sides ----------------------------------------------------------------


def _claims_in(step: str, start: int, end: int, limits: ClaimLimits) -> list[FoundClaim]:
    text = step[start:end]
    if not any(ch in text for ch in "=<>≤≥≠≈") and "\\" not in text and not _SAID.search(text):
        return []  # no relation, in symbols, LaTeX or words: nothing to read (the fast path)
    tokens = rewrite(tokenize(text, limits.max_digits))
    for t in tokens:
        t.start += start
        t.end += start
    out: list[FoundClaim] = []
    for segment, cut_before, cut_after in _segments(tokens):
        out += _segment_claims(step, segment, cut_before, cut_after, limits)
    return out


def _segments(tokens: list[Token]):
    """Runs of math tokens between breaks and words, with whether a connector word or an
    approximation word cut each run's first (cut_before) or last (cut_after) relation."""
    window: list[Token] = []  # tokens since the last break
    seg: list[Token] = []
    cut_before = False
    for i, t in enumerate(tokens):
        if t.kind in (WORD, APPROX_WORD, BREAK):
            follows = tokens[i + 1] if i + 1 < len(tokens) else None
            # "240 – (40 + 84) = 124" read past a dash: the relation's side was cut
            dash = (
                t.kind == BREAK
                and t.math in _DASHES
                and follows is not None
                and (follows.kind in (NUM, LP, VAR))
            )
            if seg:
                yield seg, cut_before, dash or _cuts_after(t, follows)
            # A word after a computation left open ("20 + 10 decorations to the 29 + 24 = 83")
            # may join it to what follows: the next relation's left side is not all there.
            cut_before = t.kind == APPROX_WORD or (
                t.kind == WORD
                and _open_operand(seg or window)
                and (t.math.lower() in CONNECTORS or _computes(seg or window))
            )
            if t.kind == WORD and t.math.lower() in _LABELS and follows is not None:
                cut_before = cut_before or follows.kind == NUM  # "section 2 = x + 200"
            if t.kind == BREAK:
                window, cut_before = [], dash
            seg = []
            continue
        if not seg and _cut_operator(tokens, i):
            cut_before = True  # "10 cows on the boat - 6 drowned = 4": the left operand is prose
        seg.append(t)
        window.append(t)
    if seg:
        yield seg, cut_before, False


def _cut_operator(tokens: list[Token], i: int) -> bool:
    """A spaced `-`/`+` that opens a run right after a word: a binary operator whose left
    operand was written in words, not a sign."""
    t = tokens[i]
    if t.kind != OP or t.math not in "+-" or i == 0 or tokens[i - 1].kind != WORD:
        return False
    return i + 1 < len(tokens) and tokens[i + 1].start > t.end


_DASHES = frozenset({"–", "—"})
# Nouns a number after labels rather than counts: "section 2 = x + 200" is not 2 = x + 200.
_LABELS = frozenset(
    "section step day week month year level part case option room floor row grade group "  # noqa: SIM905
    "team box bag page chapter remaining number no question problem round game shelf tank "
    "plan stage phase trip store class method person friend child kid student player worker "
    "machine truck car house line item".split()
)


def _open_operand(tokens: list[Token]) -> bool:
    """The tokens end in an operand and hold no relation: a connector after them joins that
    operand to what follows ("5 apples plus 3 + 2 = 10")."""
    if not tokens or any(t.kind in (REL, APPROX) for t in tokens):
        return False
    return tokens[-1].kind in (NUM, VAR, RP) or tokens[-1].math == "%"


def _computes(tokens: list[Token]) -> bool:
    return any(t.kind == OP and t.math not in ("%", "^") for t in tokens)


def _cuts_after(word: Token, follows: Token | None) -> bool:
    if word.kind == APPROX_WORD:
        return True
    return (
        word.kind == WORD
        and word.math.lower() in CONNECTORS - {"and", "with", "from", "each", "per"}
        and follows is not None
        and follows.kind in (NUM, LP, VAR)
    )


def _segment_claims(
    step: str, seg: list[Token], cut_before: bool, cut_after: bool, limits: ClaimLimits
) -> list[FoundClaim]:
    if not any(t.kind in (REL, APPROX) for t in seg):
        return []
    sides: list[list[Token]] = [[]]
    ops: list[Token] = []
    for t in seg:
        if t.kind in (REL, APPROX):
            ops.append(t)
            sides.append([])
        else:
            sides[-1].append(t)
    sides[0] = trim_open(sides[0])
    sides[-1] = trim_close(sides[-1])
    parsed = read_chain(sides, ops, limits) or [read_side(s, limits) for s in sides]
    names = names_of(seg)
    out: list[FoundClaim] = []
    last = len(ops) - 1
    for k, op in enumerate(ops):
        left, right = sides[k], sides[k + 1]
        if (k == 0 and cut_before) or (k == last and cut_after):
            continue  # "approximately", a side cut short by a word: not a claim
        if op.kind == APPROX:
            if approx := _approximation(step, op, left, right, parsed[k], parsed[k + 1]):
                out.append(approx)
            continue  # `~`, `\\sim`, `≈` on unknowns: not a claim
        if not left or not right:
            if (k == 0 and not left) or (k == last and not right):
                continue  # "= 5" after a word: the other side is prose
            s, e = (left or [op])[0].start, (right or [op])[-1].end
            out.append(FoundClaim(step[s:e].strip(), (s, e), None, UNPARSEABLE, "empty side"))
            continue
        s, e = left[0].start, right[-1].end
        text = step[s:e].strip()
        pl, pr = parsed[k], parsed[k + 1]
        if pl == NONARITH or pr == NONARITH:
            continue
        bad = next((p for p in (pl, pr) if isinstance(p, tuple)), None)
        if bad is not None:
            out.append(FoundClaim(text, (s, e), None, bad[0], bad[1]))
            continue
        lone = isinstance(pl, Num) and isinstance(pr, Num)
        lone = lone and not _units_differ(step, left, right)
        if op.math == "=" and not last and lone:
            continue  # a lone `3 = 12`: what a word leaves of a relation, not a computation
        converted = converted_relation(left, op.math, right, text, limits)
        one_unit = k == 0 and _one_unit_chain(step, sides)
        if converted is None and is_conversion(left, right) and not one_unit:
            continue  # "4.2 GB = 4.2 * 1000": units converted, not arithmetic
        if names:  # "(3/4)*number of novels": the unknown is called by its words
            pl, pr = renamed(pl, names), renamed(pr, names)  # type: ignore[arg-type]
        rel = Relation(pl, op.math, pr, text)  # type: ignore[arg-type]
        mismatch = dimension_mismatch(left, right) if op.math == "=" else ""
        out.append(FoundClaim(text, (s, e), rel, converted=converted, units_mismatch=mismatch))
    return out


_APPROX_OPS = frozenset({"≈", "\\approx"})


def _approximation(
    step: str, op: Token, left: list[Token], right: list[Token], pl: object, pr: object
) -> FoundClaim | None:
    """`1/12 ≈ 0.0595`: a computation said to be about a written number is a claim (op `≈`,
    see claim_ast.RELATION_OPS), when neither side has an unknown or a named quantity. A lone
    number on the left is a conversion or a restatement (`1 mile ≈ 1.6 km`), not a claim."""
    if op.math not in _APPROX_OPS or not left or not right or not isinstance(pr, Num):
        return None
    if isinstance(pl, Num) or is_conversion(left, right):
        return None
    if not isinstance(pl, Expr) or expr_variables(pl) or any(t.name for t in left + right):
        return None
    s, e = left[0].start, right[-1].end
    text = step[s:e].strip()
    return FoundClaim(text, (s, e), Relation(pl, "≈", pr, text))


def _one_unit_chain(step: str, sides: list[list[Token]]) -> bool:
    """`20 chickens = 20 x 3 = 60 chickens`: a chain that starts a line or a sentence and
    starts and ends on one number in the same unit converts nothing, so its first link is
    arithmetic too (false here). Not after words (`2 hours 20 minutes = ...`, `Mario ate 8
    ounces + Lydia ate 24 ounces = 8 + 24`): there the number ends a longer quantity."""
    ends = [sides[0], sides[-1]]
    if len(sides) < 3 or any(len(side) != 1 or side[0].kind != NUM for side in ends):
        return False
    if not _LINE_START.search(step, 0, ends[0][0].start):
        return False
    return bool(ends[0][0].unit) and ends[0][0].unit.lower() == ends[1][0].unit.lower()


def _units_differ(step: str, left: list[Token], right: list[Token]) -> bool:
    """`2 hours = 120 minutes`: one quantity in two units, a conversion we can check (not
    `150 minutes = 2 hours 30 minutes`, whose right side goes on past its unit)."""
    units = [side[0].unit for side in (left, right) if len(side) == 1 and side[0].kind == NUM]
    if len(units) != 2 or not all(units) or units[0] == units[1]:
        return False
    return not _GOES_ON.match(step, right[-1].end)


_LINE_START = re.compile(r"(?:^|[\n.:;!?])[ \t]*(?:(?:[-*•]|\d+[.)])[ \t]+)?$")
_GOES_ON = re.compile(r"\s*[A-Za-z]+\s*(?:and\s+)?[0-9]")


def clear_cache() -> None:
    _find.cache_clear()


def extract_premises(text: str, limits: ClaimLimits = DEFAULT_LIMITS) -> list[Relation]:
    """The relations stated in free text (a problem statement); the rest is ignored.

    `Solve the system: 4x + y = 33, 2x - y = 3.` -> [4x + y = 33, 2x - y = 3];
    `Solve $6x + 9 = 45$.` -> [6x + 9 = 45] (read like a step);
    `Compute (7 + 8) * 3.` -> [A = (7 + 8) * 3] (see `question_premise`). Never raises.
    """
    asked = question_premise(text, limits)
    if asked is not None:
        return [asked]
    return relations(find_claims(text[: limits.max_step_chars], limits))[: limits.max_premises]
