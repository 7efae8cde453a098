"""The engine core's loop, the same on a thread and in a process of its own: take what came in,
run a tick when there is work, hand the Tick out; sleep while there is nothing to run."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from pipeline.decode.engine_core import DecodeCore
from pipeline.decode.messages import Inward, Tick

log = logging.getLogger(__name__)

# Ticks made and not yet published: past this the core waits for the I/O side (a slow broker
# holds the engine back instead of piling Ticks up in memory).
MAX_UNPUBLISHED = 64


def serve(
    core: DecodeCore,
    recv: Callable[[float], list[Inward]],
    send: Callable[[Tick], None],
    max_unpublished: int = MAX_UNPUBLISHED,
) -> None:
    """Until a `stop` message: `recv(timeout)` returns the messages that came (waiting up to
    `timeout` s for the first), `send(tick)` hands one Tick out; each published Tick comes
    back as a credit."""
    unpublished = 0
    while True:
        ready = core.wants_tick and unpublished < max_unpublished
        # Idle, or every sequence waits for a verdict: wait for a message, or for time to
        # pass (a waiting run ticks on, so its verdict timeouts fire).
        timeout = 0.0 if ready else (0.05 if core.num_runs else 0.1)
        msgs = recv(timeout)
        for msg in msgs:
            if msg.stop:
                return
            unpublished -= msg.credits
            core.take(msg)
        if unpublished >= max_unpublished:
            continue
        if not (core.wants_tick or (core.num_runs and not msgs and timeout > 0)):
            continue
        try:
            tick = core.tick()
        except Exception:  # keep serving; unacked jobs are redelivered if we die later
            log.exception("decode tick failed")
            time.sleep(0.5)
            continue
        unpublished += 1
        send(tick)
