"""Serving decode's engine core: its loop (the same on a thread and in a process of its own:
take what came in, run a tick when there is work, hand the Tick out; sleep while there is
nothing to run), and the process it runs in by default (vLLM V1's EngineCore process does the
same).

On one thread beside the worker's event loop, the engine's forward passes waited for the GIL
whenever the loop ran aiokafka and Redis code: 0.4 s of a 3.1 s saturated run. Here the core has
an interpreter to itself. It talks to the worker over a socket pair: `Inward` messages in, first
a `Ready` and then a `Tick` per engine step out, each one msgpack frame.

It lives exactly as long as its worker: it ignores SIGINT and SIGTERM (the worker drains, then
sends `stop`), gets SIGKILL if the worker dies (PR_SET_PDEATHSIG), and ends at the pipe's EOF.
A core that dies takes its worker down with it (`ProcessCore`): unacked jobs are redelivered.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import msgspec

from pipeline.config import PipelineConfig, runtime
from pipeline.decode.core import DecodeCore
from pipeline.decode.messages import Inward, Ready, Tick
from pipeline.stage.engine_worker import engine_config, log_engine_stats
from pipeline.stage.engines import make_engine
from pipeline.stage.processes import set_parent_death_signal
from pipeline.telemetry import gcstats

log = logging.getLogger(__name__)
LOG_FORMAT = "%(asctime)s %(name)s %(levelname)s %(message)s"  # the CLI's


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
        if not ready and core.waiting_on_io:  # a KV read is on: admit its job soon after
            timeout = min(timeout, 0.002)
        msgs = recv(timeout)
        for msg in msgs:
            if msg.stop:
                return
            unpublished -= msg.credits
            core.take(msg)
        if unpublished >= max_unpublished:
            continue
        if not (core.wants_tick or core.report_due or (core.num_runs and not msgs and timeout > 0)):
            continue
        try:
            tick = core.tick()
        except Exception:  # keep serving; unacked jobs are redelivered if we die later
            log.exception("decode tick failed")
            time.sleep(0.5)
            continue
        unpublished += 1
        send(tick)


class _WorkerGone(Exception):
    """The worker's end of the pipe closed."""


def main(config: PipelineConfig, worker_id: str, verdict_stream: str, conn: Connection) -> None:
    """The core process: build the engine, say Ready (or why not), serve until `stop`."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # Ctrl-C reaches the whole group: the worker decides
    set_parent_death_signal(signal.SIGKILL)
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    encoder = msgspec.msgpack.Encoder()
    name = f"{worker_id} core (pid {os.getpid()})"
    try:
        engine = make_engine(
            engine_config(config, config.max_decode_seqs), config.engine, config.vllm_url
        )
        core = DecodeCore(engine, config, verdict_stream)
    except BaseException as e:
        log.exception("%s could not start", name)
        conn.send_bytes(encoder.encode(Ready(error=f"{type(e).__name__}: {e}")))
        raise SystemExit(1) from None
    # The core owns its process: what it loaded is frozen out of the collector (gcstats.py).
    if runtime().gc_freeze:
        log.info("%s: %d objects frozen out of the collector", name, gcstats.freeze())
    stats = gcstats.GCStats().install()
    conn.send_bytes(encoder.encode(Ready(kv_total=engine.kv_usage()[1])))
    log.info("%s ready", name)
    decoder = msgspec.msgpack.Decoder(Inward)

    def recv(timeout: float) -> list[Inward]:
        try:
            if not conn.poll(timeout):
                return []
            msgs = [decoder.decode(conn.recv_bytes())]
            while conn.poll(0):
                msgs.append(decoder.decode(conn.recv_bytes()))
            return msgs
        except (EOFError, OSError):  # the worker is gone: nothing to serve for
            return [Inward(stop=True)]

    def send(tick: Tick) -> None:
        try:
            conn.send_bytes(encoder.encode(tick))
        except OSError as e:
            raise _WorkerGone from e

    try:
        serve(core, recv, send)
    except _WorkerGone:
        log.warning("%s: its worker went away; stopping", name)
    finally:
        log_engine_stats(worker_id, engine)
        stats.uninstall()
        log.info("%s core_gc: %s", worker_id, stats.as_dict())
        core.close()
        engine.close()
        conn.close()
        log.info("%s stopped", name)
