"""Topic names: one per stage hand-off, all under one configurable prefix (default `stepwise.`)."""

from __future__ import annotations

import re
from dataclasses import dataclass

DEFAULT_PREFIX = "stepwise."
STAGES = ("jobs", "prefill", "handoff", "events", "results", "dlq")
# Every message is keyed by job id, so partitions bound a stage's parallelism, not its order.
DEFAULT_PARTITIONS = {
    "jobs": 4,
    "prefill": 4,
    "handoff": 4,
    "events": 4,
    "results": 4,
    "dlq": 1,  # rare and read by people: one ordered log is easiest to inspect
}
_LEGAL = re.compile(r"[A-Za-z0-9._-]*")
_MAX_NAME = 249  # Kafka's limit on a topic name


@dataclass(frozen=True, slots=True)
class Topics:
    """The pipeline's topic names under `prefix` (`Topics("t1.").jobs == "t1.jobs"`)."""

    prefix: str = DEFAULT_PREFIX

    def __post_init__(self) -> None:
        if not _LEGAL.fullmatch(self.prefix):
            raise ValueError(f"topic prefix may only use [A-Za-z0-9._-], got {self.prefix!r}")
        if len(self.prefix) + max(map(len, STAGES)) > _MAX_NAME:
            raise ValueError(f"topic prefix is too long ({len(self.prefix)} chars)")

    def name(self, stage: str) -> str:
        if stage not in STAGES:
            raise ValueError(f"unknown stage {stage!r}; stages are {STAGES}")
        return self.prefix + stage

    @property
    def jobs(self) -> str:
        return self.prefix + "jobs"

    @property
    def prefill(self) -> str:
        return self.prefix + "prefill"

    @property
    def handoff(self) -> str:
        return self.prefix + "handoff"

    @property
    def events(self) -> str:
        return self.prefix + "events"

    @property
    def results(self) -> str:
        return self.prefix + "results"

    @property
    def dlq(self) -> str:
        return self.prefix + "dlq"

    def all(self) -> tuple[str, ...]:
        return tuple(self.prefix + stage for stage in STAGES)

    def partitions(self, overrides: dict[str, int] | None = None) -> dict[str, int]:
        """Full topic name -> partition count; `overrides` is keyed by stage."""
        counts = {**DEFAULT_PARTITIONS, **(overrides or {})}
        for stage, n in counts.items():
            if stage not in STAGES:
                raise ValueError(f"unknown stage {stage!r}; stages are {STAGES}")
            if n < 1:
                raise ValueError(f"{stage}: partitions must be at least 1, got {n}")
        return {self.prefix + stage: counts[stage] for stage in STAGES}
