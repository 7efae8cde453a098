"""Checks in local worker processes: the verifier of `stepwise eval --mode verify-*`.

The same check a Celery verify worker runs (`pipeline.verify.worker.run_check`'s checker), in
a process pool instead of behind a task queue. This module imports neither torch nor the engine,
so a spawned checker process starts in well under a second.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Sequence
from concurrent.futures import Future, ProcessPoolExecutor

from pipeline.verify.checker import check_step


def check(problem: str, premises: Sequence[str], accepted: Sequence[str], step: str):
    """(verdict, detail, claims) of one step; runs in the checker process."""
    v = check_step(problem, premises, accepted, step)
    return v.verdict, v.detail or v.reason, v.claims


class LocalVerifier:
    """Checks steps in `workers` spawned processes (no torch, no engine state in them)."""

    def __init__(self, workers: int = 1) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.pool = ProcessPoolExecutor(workers, mp_context=ctx)
        # Start the processes and load the checker now, not inside a timed run.
        for f in [self.pool.submit(check, "", (), (), "1 = 1") for _ in range(workers)]:
            f.result()

    def submit(
        self, problem: str, premises: Sequence[str], accepted: Sequence[str], step: str
    ) -> Future:
        return self.pool.submit(check, problem, tuple(premises), tuple(accepted), step)

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)
