"""How decode takes a handoff's KV: imported (read in the background first when it comes over
the network), or the prompt prefilled again when it cannot come; and what happened, for the
worker's metrics, the Result's timings and a traced job's `kv_import` span.

A remote read (Mooncake) takes tens of ms that the running batch would otherwise wait out: it is
begun off the engine's loop, one at a time (the reader stages one sequence), and its job is
admitted once it is done; Mooncake's call lets go of the GIL, so the engine steps meanwhile.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from pipeline import schema
from pipeline.decode.messages import TickStats, TraceMark
from pipeline.engine import Request
from pipeline.engine.base import StepEngine
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence
from pipeline.errors import StepwiseError
from pipeline.transfer import TransferExpiredError
from pipeline.transfer.kv_import import KVImporter

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class KVOutcome:
    """How a job's KV came: its transport (as read: `mooncake` for a pool read remotely;
    `none` without a handoff's KV), imported or prefilled again, how long, why not."""

    transport: str
    outcome: str  # imported | reprefill
    ms: float
    nbytes: int
    reason: str = ""


class KVIntake:
    def __init__(self, engine: StepEngine, importer: KVImporter) -> None:
        self.engine = engine
        self.importer = importer
        self.num_reprefills = 0  # handoffs whose KV could not be imported

    @property
    def reading(self) -> str | None:
        """The job whose KV is being read in the background."""
        return self.importer.reading

    def is_remote(self, h: schema.Handoff) -> bool:
        return self.engine.can_export_kv and self.importer.is_remote(h)

    def can_start(self, h: schema.Handoff) -> bool:
        """Can the next tick start `h`, or begin its KV read? Not while another job's remote
        read is on (one at a time), nor while its own is."""
        if not self.is_remote(h):
            return True
        reading = self.reading
        return reading is None or (reading == h.id and self.importer.ready(h.id))

    def reads_ahead(self, h: schema.Handoff) -> bool:
        """Should `h` wait while its KV is read in the background (the read begun now if none
        is on)? False for a local import, once its read is done, or when it could not begin:
        then `take` finishes it, or imports as before."""
        if not self.is_remote(h):
            return False
        reading = self.reading
        if reading is None:
            return self.importer.begin(h)
        return reading != h.id or not self.importer.ready(h.id)

    def forget(self, h: schema.Handoff) -> None:
        """`h` failed to start: a read begun for it must not hold every later one back."""
        self.importer.forget(h.id)

    def take(
        self, h: schema.Handoff, params: SamplingParams, stats: TickStats
    ) -> tuple[Sequence, tuple[str, str] | None, KVOutcome]:
        """The handoff's sequence with its KV imported, or its prompt prefilled again when the
        KV cannot come (no KV handed off, a transfer that failed or ran past its deadline),
        counted in `stats`; the buffer to ack; what happened."""
        engine, importer = self.engine, self.importer
        if h.kv is not None and engine.can_export_kv:
            try:
                seq = importer.import_kv(engine, h, params)
                rec = importer.last
                kv = KVOutcome(rec.transport if rec else h.kv.transport, "imported",
                               rec.ms if rec else 0.0, h.kv.nbytes)  # fmt: skip
                stats.kv_imports.append((kv.transport, kv.outcome, kv.ms / 1000))
                return seq, (h.kv.owner, h.kv.handle), kv
            except (TransferExpiredError, StepwiseError) as e:
                log.info("%s: KV import failed (%s); prefilling again", h.id, e)
                rec = importer.last
                kv = KVOutcome(rec.transport if rec else h.kv.transport, "reprefill",
                               rec.ms if rec else 0.0, 0, f"{e.code}: {e}")  # fmt: skip
        elif h.kv is not None:  # an engine that cannot import (vLLM): by design, not a failure
            kv = KVOutcome(h.kv.transport, "reprefill", 0.0, 0, "engine cannot import")
        else:  # prefill's export pool was full: it sent the job on without KV
            kv = KVOutcome("none", "reprefill", 0.0, 0, "no KV handed off")
        self.num_reprefills += 1
        stats.kv_imports.append((kv.transport, kv.outcome, kv.ms / 1000))
        return engine.add(Request(h.id, list(h.token_ids), params)), None, kv


def kv_mark(h: schema.Handoff, kv: KVOutcome) -> TraceMark:
    """A traced job's KV import (from when its read began): the transport, the bytes, and the
    fallback when it failed."""
    attrs: dict[str, str | int | float | bool] = {"transport": kv.transport, "bytes": kv.nbytes}
    if kv.outcome == "reprefill":
        attrs.update(fallback="reprefill", reason=kv.reason[:300])
    end = time.time_ns()
    return TraceMark(h.id, "kv_import", end, -1, end - int(kv.ms * 1e6), attrs)
