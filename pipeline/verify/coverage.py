"""What a job's verification covered: claims checked, entailed, contradicted, unreadable, and
the share of its steps that had anything checkable (plain logic, no solver).

A job whose steps held nothing the verifier could read is `nothing_checkable`, never
`verified`: `unknown` and `no_claim` verify nothing.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

UNREADABLE_REASONS = frozenset({"unparseable", "unsupported", "limit"})
CLAIM_VERDICTS = ("entailed", "contradicted", "consistent", "unknown", "ungrounded")


@dataclass(slots=True)
class Tally:
    """Claims over every check made (rolled-back attempts too: they were checked), steps over
    the chain that was kept."""

    checks: int = 0
    claims: int = 0
    entailed: int = 0
    contradicted: int = 0
    consistent: int = 0
    unknown: int = 0  # read, but undecided (solver timeout, inconsistent premises)
    ungrounded: int = 0  # read, not refuted, with a number found nowhere before
    unreadable: int = 0  # not read (unparseable, unsupported, limit)

    def add_check(self, claims: Iterable[tuple[str, str]]) -> None:
        """One verdict's claims as (verdict, reason) pairs."""
        self.checks += 1
        for verdict, reason in claims:
            self.claims += 1
            if verdict == "unknown" and reason in UNREADABLE_REASONS:
                self.unreadable += 1
            elif verdict in CLAIM_VERDICTS:
                setattr(self, verdict, getattr(self, verdict) + 1)
            else:
                self.unknown += 1

    def report(self, chain: list[tuple[str, list[tuple[str, str]]]], mode: str = "on") -> dict:
        """The figures, with `chain` the kept steps as (step verdict, [(claim verdict, reason)])."""
        steps = len(chain)
        checkable = [
            v for v, claims in chain if any(r not in UNREADABLE_REASONS for _, r in claims)
        ]
        if mode == "off":
            status = "off"
        elif not checkable:
            status = "nothing_checkable"
        elif all(v == "entailed" for v in checkable) and len(checkable) == steps:
            status = "verified"
        else:
            status = "partial"
        return {
            "status": status,
            "checks": self.checks,
            "claims": self.claims,
            "entailed": self.entailed,
            "contradicted": self.contradicted,
            "consistent": self.consistent,
            "unknown": self.unknown,
            "ungrounded": self.ungrounded,
            "unreadable": self.unreadable,
            "steps": steps,
            "steps_checkable": len(checkable),
            "checkable_share": len(checkable) / steps if steps else 0.0,
        }
