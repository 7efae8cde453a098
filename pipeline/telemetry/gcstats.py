"""Python's cyclic garbage collector in a long-running worker: how long it stops the world.

A full (generation 2) collection walks every object the process holds: the model's modules,
the tokenizer's vocabulary, every live sequence's token list. In a decode worker that took
0.2-0.4 s at a time, and each one stops the engine thread (it runs in whichever thread
allocated last, holding the GIL). `freeze()` after start-up moves everything alive then into
the permanent generation, as vLLM's engine core does, so collections walk only what was made
since. `GCStats` counts the pauses, per generation, for the worker's log and its metrics.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field


@dataclass(slots=True)
class GCStats:
    """Collections seen since `install()`: count, total and longest pause, per generation."""

    count: list[int] = field(default_factory=lambda: [0, 0, 0])
    total_s: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    max_s: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])
    _t0: float = 0.0

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
            return
        gen = info.get("generation", 2)
        took = time.perf_counter() - self._t0
        self.count[gen] += 1
        self.total_s[gen] += took
        self.max_s[gen] = max(self.max_s[gen], took)

    def install(self) -> GCStats:
        if self._callback not in gc.callbacks:
            gc.callbacks.append(self._callback)
        return self

    def uninstall(self) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def as_dict(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for gen in range(3):
            out[f"gen{gen}_count"] = self.count[gen]
            out[f"gen{gen}_s"] = round(self.total_s[gen], 4)
            out[f"gen{gen}_max_s"] = round(self.max_s[gen], 4)
        return out


def freeze() -> int:
    """Collect once, then move every surviving object to the permanent generation (never
    collected, never walked again); returns how many objects that froze."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
