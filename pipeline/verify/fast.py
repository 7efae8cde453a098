"""Verdicts decode can give itself, with no round trip: a claim with no unknowns that is false
(`88 * 40 = 3120`, `7 / 3 = 2`) is false whatever the problem, the earlier steps or the solver
state say, so the step is contradicted the moment it is written. So is a claim on unknowns the
problem's own equations fix (`repair.problem_values`: `3x + y = 22, 2x - y = 3` fixes x = 5,
y = 7) that is false at their values (`9x = 22 + 3`): the premises refute it, as the checker
would say. Everything else (a step whose claims all hold still needs its grounding and
bindings checked, other unknowns need Z3 with state) goes to the checker (Celery, or `stepwise
eval`'s local process) as before.

Pure logic, torch-free; the cost is one read of the step (`find_claims`, cached per text).
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from pipeline.verify.claim_ast import DEFAULT_LIMITS, ClaimLimits, expr_variables
from pipeline.verify.found_claim import FoundClaim
from pipeline.verify.repair import false_claims
from pipeline.verify.unknowns import ARITHMETIC, claim_kind, describe
from pipeline.verify.verdicts import CONTRADICTED, ClaimVerdict, StepVerdict, _short


def fast_verdict(
    step: str,
    limits: ClaimLimits = DEFAULT_LIMITS,
    values: Mapping[str, Fraction] | None = None,
) -> StepVerdict | None:
    """`contradicted`, with the false claims, when a claim with no unknowns (or, with `values`,
    on those unknowns alone) is false; None when the checker must decide."""
    if len(step) > limits.max_step_chars:
        return None
    return contradicted(tuple(c for c, _, _ in false_claims(step, limits, values)), values)


def contradicted(
    claims: tuple[FoundClaim, ...], values: Mapping[str, Fraction] | None = None
) -> StepVerdict | None:
    """The step's verdict when these false claims (spans into its text) contradict it; a claim
    on unknowns is refuted by the problem's values of them (`values`), and is of the kind the
    checker would give it (an equation, a solution)."""
    if not claims:
        return None
    fixed = dict(values or {})
    bad = []
    for c in claims:
        names = expr_variables(c.relation.lhs) | expr_variables(c.relation.rhs)
        if not names:
            bad.append(
                ClaimVerdict(c.text, c.span, CONTRADICTED, "", _short(f"{c.text} is false"),
                             ARITHMETIC)
            )  # fmt: skip
            continue
        at = describe({n: fixed[n] for n in names})
        detail = _short(f"{c.text} is refuted by the problem ({at})")
        kind = claim_kind(c.relation, set(fixed))
        bad.append(ClaimVerdict(c.text, c.span, CONTRADICTED, "", detail, kind))
    return StepVerdict(CONTRADICTED, "", bad[0].detail, len(bad), tuple(bad))
