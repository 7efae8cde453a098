"""Final answers stated without a relation (`Answer: 5`, `The answer is 5.`, `#### 5`,
`\\boxed{5}`): the claim `answer_var = 5`, when the question asks for a value."""

from __future__ import annotations

import re

from pipeline.verify.claim_ast import Relation, Var
from pipeline.verify.claims import ClaimLimits
from pipeline.verify.found_claim import UNPARSEABLE, FoundClaim
from pipeline.verify.prose_rewrite import rewrite
from pipeline.verify.prose_sides import read_side
from pipeline.verify.prose_tokens import APPROX_WORD, BREAK, NONARITH, WORD, tokenize

_ANSWER = re.compile(
    r"(?:\banswer\s*(?:is|:)\s*\**\s*:?\s*|^\s*#{4}\s*|\\boxed\s*\{)", re.IGNORECASE | re.MULTILINE
)


def bare_answers(
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
        expr = read_side(tokens, limits)
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
