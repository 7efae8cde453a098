"""A check's verdicts: the values, a claim's and a step's record, and how a step's verdict
follows from its claims'."""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from pipeline.verify.prose import FoundClaim  # the reasons prose gives

ENTAILED = "entailed"
CONTRADICTED = "contradicted"
CONSISTENT = "consistent"
NO_CLAIM = "no_claim"
UNKNOWN = "unknown"
# A number found nowhere in the problem or the earlier steps (grounding.py): reported, never a
# contradiction, so decode never backtracks on it.
UNGROUNDED = "ungrounded"
VERDICTS = (ENTAILED, CONTRADICTED, CONSISTENT, NO_CLAIM, UNKNOWN, UNGROUNDED)

# Reasons that come with UNKNOWN (and prose's LIMIT, UNPARSEABLE).
TIMEOUT = "timeout"
INCONSISTENT_PREMISES = "inconsistent_premises"
SOLVER = "solver"

_MAX_DETAIL = 120


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    """The verdict on one claim of a step, with where it is in the step's text."""

    text: str
    span: tuple[int, int]
    verdict: str
    reason: str = ""
    detail: str = ""
    # How it was checked: arithmetic | identity | equation | solution (unknowns.py), binding
    # (a quantity given a second value, bindings.py) or quote (the problem restated wrong,
    # quotes.py).
    kind: str = ""
    # A binding's other statement, or a quote's sentence of the problem: where ("the problem",
    # "step 2") and its span there.
    earlier_source: str = ""
    earlier_span: tuple[int, int] | None = None


@dataclass(frozen=True, slots=True)
class StepVerdict:
    """The verdict on one step; `detail` is short text for people.

    A step is contradicted when any claim is; ungrounded when none is and one uses a number
    found nowhere before; entailed when every claim was read and is entailed, consistent when
    none is refuted and one is merely consistent, else unknown."""

    verdict: str
    reason: str = ""
    detail: str = ""
    num_claims: int = 0
    claims: tuple[ClaimVerdict, ...] = field(default=(), compare=False)


def _short(text: str) -> str:
    return text if len(text) <= _MAX_DETAIL else text[: _MAX_DETAIL - 3] + "..."


def number_text(value: Fraction) -> str:
    """`16`, `22.5`, `1/3` as people write them."""
    if value.denominator == 1:
        return str(value.numerator)
    if 10**6 % value.denominator == 0:
        return f"{float(value):g}"
    return str(value)


def _unread(claim: FoundClaim) -> ClaimVerdict:
    return ClaimVerdict(claim.text, claim.span, UNKNOWN, claim.reason, _short(claim.detail))


def _step_verdict(results: tuple[ClaimVerdict, ...], n: int) -> StepVerdict:
    """One verdict for a step from its claims' (see StepVerdict)."""
    if not results:
        return StepVerdict(NO_CLAIM)
    for want in (CONTRADICTED, UNGROUNDED):
        hit = next((r for r in results if r.verdict == want), None)
        if hit is not None:
            return StepVerdict(want, "", hit.detail, n, results)
    for want in (CONTRADICTED, CONSISTENT):
        hit = next((r for r in results if r.verdict == want), None)
        if hit is not None and (
            want == CONTRADICTED or all(r.verdict in (ENTAILED, CONSISTENT) for r in results)
        ):
            return StepVerdict(want, "", hit.detail, n, results)
    if all(r.verdict == ENTAILED for r in results):
        return StepVerdict(ENTAILED, "", "", n, results)
    first = next(r for r in results if r.verdict not in (ENTAILED, CONSISTENT))
    return StepVerdict(UNKNOWN, first.reason, first.detail, n, results)
