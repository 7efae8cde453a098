"""Verdicts decode can give itself, with no round trip: a claim with no unknowns that is false
(`88 * 40 = 3120`, `7 / 3 = 2`) is false whatever the problem, the earlier steps or the solver
state say, so the step is contradicted the moment it is written. Everything else (a step whose
claims all hold still needs its grounding and bindings checked, unknowns need Z3 with state)
goes to the checker (Celery, or `stepwise eval`'s local process) as before.

Pure logic, torch-free; the cost is one read of the step (`find_claims`, cached per text).
"""

from __future__ import annotations

from pipeline.verify.claim_ast import DEFAULT_LIMITS, ClaimLimits
from pipeline.verify.found_claim import FoundClaim
from pipeline.verify.repair import false_claims
from pipeline.verify.verdicts import CONTRADICTED, ClaimVerdict, StepVerdict, _short


def fast_verdict(step: str, limits: ClaimLimits = DEFAULT_LIMITS) -> StepVerdict | None:
    """`contradicted`, with the false claims, when a claim with no unknowns is false; None when
    the checker must decide."""
    if len(step) > limits.max_step_chars:
        return None
    return contradicted(tuple(c for c, _, _ in false_claims(step, limits)))


def contradicted(claims: tuple[FoundClaim, ...]) -> StepVerdict | None:
    """The step's verdict when these false claims (spans into its text) contradict it."""
    if not claims:
        return None
    bad = tuple(
        ClaimVerdict(c.text, c.span, CONTRADICTED, "", _short(f"{c.text} is false"), "arithmetic")
        for c in claims
    )
    return StepVerdict(CONTRADICTED, "", bad[0].detail, len(bad), bad)
