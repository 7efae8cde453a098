"""What the claim finder returns for one relation of a step: the relation it read, or why it
could not read it."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.verify.claim_ast import Relation

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
    # The relation with every quantity in one unit, when its units mix scales of one
    # dimension (`1 hour + 30 minutes = 90 minutes`): the claim holds if either reading does.
    converted: Relation | None = None
    # Its sides measure different things (`60 km/hr * 2 hours = 120 minutes`): the numbers
    # may hold, the claim does not (prose_units.dimension_mismatch says why).
    units_mismatch: str = ""


def relations(claims: tuple[FoundClaim, ...]) -> list[Relation]:
    """The readable relations of `claims`."""
    return [c.relation for c in claims if c.relation is not None]
