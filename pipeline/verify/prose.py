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
from dataclasses import dataclass, replace

from pipeline.verify.claims import (
    DEFAULT_LIMITS,
    ClaimError,
    ClaimLimits,
    Num,
    Relation,
    Var,
    parse_expr,
    parse_sides,
    variables,
)
from pipeline.verify.prose_rewrite import rewrite
from pipeline.verify.prose_tokens import (
    APPROX,
    APPROX_WORD,
    BREAK,
    CONNECTORS,
    LP,
    NONARITH,
    NUM,
    REL,
    RP,
    UNSUP,
    VAR,
    WORD,
    Token,
    tokenize,
)

UNPARSEABLE = "unparseable"
UNSUPPORTED = "unsupported"
LIMIT = "limit"


@dataclass(frozen=True, slots=True)
class FoundClaim:
    """One relation of a step: parsed (`relation`), or unreadable (`reason`)."""

    text: str  # the source text of the pair, as written
    span: tuple[int, int]  # [start, end) in the step
    relation: Relation | None = None
    reason: str = ""  # with relation None: unparseable | unsupported | limit
    detail: str = ""
    # One of alternatives ("x = 2 or x = 3"): checked on its own, never taken as known.
    alternative: bool = False


_GSM = re.compile(r"<<(.*?)>>")
_FENCE = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
# A relation said in words (prose_words.py): only such lines are tokenized without a symbol.
_SAID = re.compile(
    r"\b(?:is|equals?|makes|gives|leaves|yields|totals|are|was|were|comes|gets?)\s+(?:equal\s+"
    r"to\s+|exactly\s+)?[$(]?[0-9]",
    re.IGNORECASE,
)
_ANSWER = re.compile(
    r"(?:\banswer\s*(?:is|:)\s*\**\s*:?\s*|^\s*#{4}\s*|\\boxed\s*\{)", re.IGNORECASE | re.MULTILINE
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
        found += _bare_answers(step, limits, answer_var, found)
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
    if not any(marked):
        return found
    return [replace(c, alternative=m) if m else c for c, m in zip(found, marked, strict=True)]


def relations(claims: tuple[FoundClaim, ...]) -> list[Relation]:
    """The readable relations of `claims`."""
    return [c.relation for c in claims if c.relation is not None]


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
    if not any(ch in text for ch in "=<>≤≥≠") and "\\" not in text and not _SAID.search(text):
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
            if seg:
                follows = tokens[i + 1] if i + 1 < len(tokens) else None
                yield seg, cut_before, _cuts_after(t, follows)
            cut_before = t.kind == APPROX_WORD or (
                t.kind == WORD and t.math.lower() in CONNECTORS and _open_operand(seg or window)
            )
            if t.kind == BREAK:
                window, cut_before = [], False
            seg = []
            continue
        seg.append(t)
        window.append(t)
    if seg:
        yield seg, cut_before, False


def _open_operand(tokens: list[Token]) -> bool:
    """The tokens end in an operand and hold no relation: a connector after them joins that
    operand to what follows ("5 apples plus 3 + 2 = 10")."""
    if not tokens or any(t.kind in (REL, APPROX) for t in tokens):
        return False
    return tokens[-1].kind in (NUM, VAR, RP) or tokens[-1].math == "%"


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
    sides[0] = _trim_open(sides[0])
    sides[-1] = _trim_close(sides[-1])
    parsed = _chain(sides, ops, limits) or [_side(s, limits) for s in sides]
    out: list[FoundClaim] = []
    last = len(ops) - 1
    for k, op in enumerate(ops):
        left, right = sides[k], sides[k + 1]
        if op.kind == APPROX or (k == 0 and cut_before) or (k == last and cut_after):
            continue  # `≈`, "approximately", a side cut short by a word: not a claim
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
        if op.math == "=" and not last and isinstance(pl, Num) and isinstance(pr, Num):
            continue  # a lone `3 = 12`: what a word leaves of a relation, not a computation
        if _conversion(left, right):
            continue  # "4.2 GB = 4.2 * 1000": units converted, not arithmetic
        out.append(FoundClaim(text, (s, e), Relation(pl, op.math, pr, text)))  # type: ignore[arg-type]
    return out


def _conversion(left: list[Token], right: list[Token]) -> bool:
    """A left side that is one number with its unit ("4.2 GB = ..."), against a right side in
    another unit or none. (A unit after the right side only ends the sentence: "= 1600 m".)"""

    def unit(side: list[Token]) -> str:
        return side[0].unit if len(side) == 1 and side[0].kind == NUM else ""

    return bool(unit(left)) and unit(left) != unit(right)


def _trim_open(side: list[Token]) -> list[Token]:
    """Unbalanced "(" at the start of a first side: prose's "(so 3 + 4 = 7)"."""
    while side and side[0].kind == LP and _depth(side) > 0:
        side = side[1:]
    return side


def _trim_close(side: list[Token]) -> list[Token]:
    while side and side[-1].kind == RP and _depth(side) < 0:
        side = side[:-1]
    return side


def _depth(side: list[Token]) -> int:
    return sum(t.math.count("(") - t.math.count(")") for t in side if t.kind in (LP, RP, "op"))


def _chain(sides: list[list[Token]], ops: list[Token], limits: ClaimLimits) -> list | None:
    """Every side at once, in one parse of the whole chain: the common case (a clean chain of
    arithmetic) costs one grammar run instead of one per side. None: read side by side."""
    if not all(sides) or any(op.kind == APPROX for op in ops):
        return None
    if any(t.kind in (NONARITH, UNSUP) for side in sides for t in side):
        return None
    if sum(len(side) for side in sides) > limits.max_tokens:
        return None
    pieces = [" ".join(t.math for t in sides[0])]
    for op, side in zip(ops, sides[1:], strict=True):
        pieces.append(f"{op.math} {' '.join(t.math for t in side)}")
    try:
        return parse_sides(" ".join(pieces), limits)
    except ClaimError:
        return None


def _side(side: list[Token], limits: ClaimLimits):
    """An Expr; NONARITH; or (reason, detail) for a side that cannot be read."""
    if not side:
        return None
    if any(t.kind == NONARITH for t in side):
        return NONARITH
    unsup = next((t for t in side if t.kind == UNSUP), None)
    if unsup is not None:
        if unsup.math == "limit":
            return (LIMIT, f"number with more than {limits.max_digits} digits")
        return (UNSUPPORTED, f"{unsup.math!r} is not evaluated")
    if len(side) > limits.max_tokens:
        return (LIMIT, f"more than {limits.max_tokens} tokens")
    try:
        return parse_expr(" ".join(t.math for t in side), limits)
    except ClaimError as e:
        return (e.reason, str(e)[:120])


# ---- bare final answers ----------------------------------------------------------------------


def _bare_answers(
    step: str, limits: ClaimLimits, answer_var: str, found: list[FoundClaim]
) -> list[FoundClaim]:
    """`answer_var = value` for each final answer stated without a relation."""
    out = []
    for m in _ANSWER.finditer(step):
        start = m.end()
        if m.group().rstrip().endswith("{"):  # \boxed{...}: up to the matching brace
            end = _closing_brace(step, start)
        else:
            stop = re.search(r"(?:\.(?!\d)|[,;\n]|\*\*|$)", step[start:])
            end = start + (stop.start() if stop else len(step) - start)
        value = step[start:end]
        if not value.strip() or any(c.span[0] <= start < c.span[1] for c in [*found, *out]):
            continue
        if "\\boxed" in value:
            continue  # "The answer is \\boxed{5}": the box is read on its own
        if any(ch in value for ch in "=<>≤≥≠"):
            continue  # a relation: read as one already
        tokens = [t for t in rewrite(tokenize(value, limits.max_digits)) if t.kind != BREAK]
        tokens = [t for t in tokens if t.kind != WORD or t.math.lower() not in _FILLER]
        s = start + (len(value) - len(value.lstrip()))
        e = start + len(value.rstrip())
        text = step[s:e]
        if not tokens:
            continue
        if any(t.kind in (WORD, APPROX_WORD) for t in tokens):
            out.append(FoundClaim(text, (s, e), None, UNPARSEABLE, f"answer {text[:40]!r}"))
            continue
        expr = _side(tokens, limits)
        if expr is None or expr == NONARITH:
            continue
        if isinstance(expr, tuple):
            out.append(FoundClaim(text, (s, e), None, expr[0], expr[1]))
            continue
        rel_text = f"{answer_var} = {text.strip()}"
        out.append(FoundClaim(text, (s, e), Relation(Var(answer_var), "=", expr, rel_text)))
    return out


# Words around an answer that are not part of its value ("The answer is $12 dollars.").
_FILLER = {"dollars", "dollar", "cents", "apples", "units", "total", "in", "all"}


def _closing_brace(text: str, start: int) -> int:
    depth = 1
    for i in range(start, min(len(text), start + 200)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return i
    return start


def clear_cache() -> None:
    _find.cache_clear()
