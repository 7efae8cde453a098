"""What crosses between decode's I/O side and its engine core (a thread or a process of its
own): handoffs, verdicts, live budgets and publish credits in; Ticks out.

The engine core has no broker, no acks and no event loop: it gets Handoffs and Verdicts and
hands back, per engine step, what the I/O side must publish. The same messages go over a pipe
(msgpack) when the core runs in its own process, and as objects when it runs on a thread.
"""

from __future__ import annotations

import msgspec

from pipeline import schema
from pipeline.budget.signals import DecodeReport


class Inward(msgspec.Struct, kw_only=True, omit_defaults=True):
    """I/O side -> engine core; one message carries whatever has gathered since the last."""

    handoffs: list[schema.Handoff] = []
    verdicts: list[schema.VerdictMessage] = []
    budgets: dict[str, schema.Budget] | None = None  # live limits per SLO class, when changed
    credits: int = 0  # Ticks the I/O side has published since the last message
    stop: bool = False  # the core finishes its loop and exits
    traced: list[str] = []  # jobs among `handoffs` whose trace is sampled: the core marks them

    def merge(self, other: Inward) -> None:
        self.handoffs += other.handoffs
        self.traced += other.traced
        self.verdicts += other.verdicts
        self.budgets = other.budgets if other.budgets is not None else self.budgets
        self.credits += other.credits
        self.stop = self.stop or other.stop


class StepPut(msgspec.Struct, array_like=True):
    """A verified step for the step cache: whose, under which job key, after which steps."""

    tenant: str
    app: str
    user: str
    key: str
    before: list[str]
    text: str
    verdict: str


class TraceMark(msgspec.Struct, array_like=True):
    """A moment of a traced job, from which the I/O side builds its spans (docs/tracing.md):
    `kv_import` (from `start_ns`), a `step` generated, a `verdict`, a `backtrack`, a
    `forced_answer`, an `early_exit`. Times are wall-clock ns (the core may be another
    process: both read the same clock)."""

    id: str
    kind: str
    ts_ns: int
    step: int = -1
    start_ns: int = 0
    attrs: dict[str, str | int | float | bool] = {}


class TickStats(msgspec.Struct, kw_only=True):
    """The core's telemetry for one tick (the I/O side's process owns the metrics)."""

    generated_tokens: int = 0
    # The engine's forwards and speculative decoding's counts in this tick (see EngineStats).
    forwards: int = 0
    spec_drafts: int = 0  # proposals verified
    spec_draft_tokens: int = 0  # tokens proposed
    spec_accepted_tokens: int = 0
    step_tokens: list[int] = []  # tokens of each step of the jobs that finished
    step_hits: int = 0  # step-cache lookups
    step_misses: int = 0
    kv_used: int = 0  # blocks
    kv_total: int = 0
    num_runs: int = 0  # jobs in the engine after the tick
    num_reprefills: int = 0  # handoffs whose KV could not be imported (so far)
    kv_imports: list[tuple[str, str, float]] = []  # (transport, imported|reprefill, seconds)


class Tick(msgspec.Struct, kw_only=True):
    """One engine step's output, for the I/O side to publish in order."""

    events: list[tuple[str, bytes]] = []  # (job id, encoded Event), ready for the events topic
    results: list[schema.Result] = []  # jobs that finished (or could not start)
    kv_acks: list[tuple[str, str]] = []  # (owner, handle) of KV buffers imported
    checks: list[schema.VerifyRequest] = []  # steps for the verify workers
    puts: list[StepPut] = []
    marks: list[TraceMark] = []  # traced jobs only
    stats: TickStats = msgspec.field(default_factory=TickStats)
    report: DecodeReport | None = None  # the load report, about once a second


class Ready(msgspec.Struct, kw_only=True):
    """The core process's first message: up (with its engine's KV pool size), or why not."""

    error: str | None = None
    kv_total: int = 0
