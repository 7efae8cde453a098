"""The decode worker's handle on its engine core: a process of its own (the default), or a
thread of the worker's (`STEPWISE_DECODE_CORE=thread`: tests that patch the core in-process).

Both take `Inward` messages from the event loop (what one loop turn submits goes as one) and
hand each Tick to `on_tick` on the event loop; `on_death` hears of a core that stopped by
itself, which the worker cannot go on without.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import socket
import struct
import threading
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable

import msgspec

from pipeline.config import PipelineConfig
from pipeline.decode import core_serve
from pipeline.decode.core import DecodeCore
from pipeline.decode.core_serve import serve
from pipeline.decode.messages import Inward, Ready, Tick
from pipeline.errors import StepwiseError
from pipeline.stage.engine_worker import EngineStageWorker

log = logging.getLogger(__name__)


class CoreClient(ABC):
    def __init__(self, on_tick: Callable[[Tick], None], on_death: Callable[[str], None]) -> None:
        self.on_tick = on_tick
        self.on_death = on_death
        self.kv_total = 0  # the core's KV pool, in blocks
        self.closing = False
        self._pending: Inward | None = None

    def submit(self, msg: Inward) -> None:
        """Event loop: queue a message for the core; one loop turn's messages go as one."""
        if self._pending is None:
            self._pending = msg
            asyncio.get_running_loop().call_soon(self._flush)
        else:
            self._pending.merge(msg)

    def _flush(self) -> None:
        msg, self._pending = self._pending, None
        if msg is not None and not self.closing:
            self._deliver(msg)

    @abstractmethod
    async def start(self) -> None:
        """Build the engine and start the core's loop; raises if the engine cannot start."""

    @abstractmethod
    def _deliver(self, msg: Inward) -> None: ...

    @abstractmethod
    async def close(self) -> None:
        """Stop the core's loop (after the worker's drain) and release the engine."""


class ThreadCore(CoreClient):
    """The core on the worker's engine thread, behind the same GIL as its event loop."""

    def __init__(self, worker: EngineStageWorker, verdict_stream: str, on_tick, on_death) -> None:
        super().__init__(on_tick, on_death)
        self.worker = worker
        self.verdict_stream = verdict_stream
        self.inbox: deque[Inward] = deque()
        self.work = threading.Event()
        self.ticks: deque[Tick] = deque()
        self._take_called = False  # a `_take` is scheduled on the event loop
        self.future: asyncio.Future | None = None

    async def start(self) -> None:
        engine = await self.worker.start_engine(self.worker.config.max_decode_seqs)
        self.core = DecodeCore(engine, self.worker.config, self.verdict_stream)
        self.kv_total = engine.kv_usage()[1]
        self.loop = asyncio.get_running_loop()
        self.future = asyncio.ensure_future(self.worker.in_engine(self._serve))
        self.future.add_done_callback(self._ended)

    def _serve(self) -> None:
        try:
            serve(self.core, self._recv, self._send)
        except BaseException:  # nothing else would say so: the future is awaited late
            log.exception("decode's engine loop died")
            raise
        finally:
            self.core.close()

    def _ended(self, future: asyncio.Future) -> None:
        if not self.closing:
            why = "cancelled" if future.cancelled() else repr(future.exception())
            self.on_death(f"decode's engine loop ended by itself ({why})")

    def _recv(self, timeout: float) -> list[Inward]:  # engine thread
        if not self.inbox and timeout > 0:
            self.work.wait(timeout)
        self.work.clear()  # before taking: a message after this sets it again
        msgs = []
        while self.inbox:
            msgs.append(self.inbox.popleft())
        return msgs

    def _send(self, tick: Tick) -> None:  # engine thread
        self.ticks.append(tick)
        if not self._take_called:  # one wake-up of the event loop for a run of ticks
            self._take_called = True
            self.loop.call_soon_threadsafe(self._take)

    def _take(self) -> None:
        self._take_called = False  # first: a Tick appended after this schedules another call
        while self.ticks:
            self.on_tick(self.ticks.popleft())

    def _deliver(self, msg: Inward) -> None:
        self.inbox.append(msg)
        self.work.set()

    async def close(self) -> None:
        self.closing = True
        if self.future is not None:
            self._deliver(Inward(stop=True))
            with contextlib.suppress(BaseException):
                await self.future


class ProcessCore(CoreClient):
    """The core in a process of its own (`core_serve.main`), over a socket pair."""

    def __init__(self, config: PipelineConfig, worker_id: str, verdict_stream: str,
                 on_tick, on_death) -> None:  # fmt: skip
        super().__init__(on_tick, on_death)
        self.config = config
        self.worker_id = worker_id
        self.verdict_stream = verdict_stream
        self.proc: multiprocessing.process.BaseProcess | None = None
        self.writer: asyncio.StreamWriter | None = None
        self._reading: asyncio.Task | None = None
        self._encoder = msgspec.msgpack.Encoder()

    async def start(self) -> None:
        # spawn, not fork: the worker has threads (and torch's pools) a fork would copy mid-use.
        ctx = multiprocessing.get_context("spawn")
        mine, theirs = ctx.Pipe(duplex=True)
        self.proc = ctx.Process(
            target=core_serve.main,
            args=(self.config, self.worker_id, self.verdict_stream, theirs),
            name=f"{self.worker_id}-core",
            daemon=True,
        )
        self.proc.start()
        theirs.close()
        sock = socket.socket(fileno=os.dup(mine.fileno()))
        mine.close()
        self.reader, self.writer = await asyncio.open_unix_connection(sock=sock)
        try:
            ready = msgspec.msgpack.decode(await self._frame(), type=Ready)
        except (asyncio.IncompleteReadError, ConnectionError):
            code = await self._exit_code()
            raise StepwiseError(
                f"decode's engine process exited (code {code}) before it was ready; its log "
                "says why", code="engine_failed",
            ) from None  # fmt: skip
        if ready.error is not None:
            await self._exit_code()
            raise StepwiseError(
                f"decode's engine could not start: {ready.error}", code="engine_failed"
            )
        self.kv_total = ready.kv_total
        self._reading = asyncio.create_task(self._read_ticks())

    async def _frame(self) -> bytes:
        # multiprocessing.Connection's framing, which the core's end reads and writes.
        (size,) = struct.unpack("!i", await self.reader.readexactly(4))
        if size == -1:
            (size,) = struct.unpack("!Q", await self.reader.readexactly(8))
        return await self.reader.readexactly(size)

    async def _read_ticks(self) -> None:
        decoder = msgspec.msgpack.Decoder(Tick)
        try:
            while True:
                self.on_tick(decoder.decode(await self._frame()))
        except (asyncio.IncompleteReadError, ConnectionError):
            if not self.closing:
                code = await self._exit_code()
                self.on_death(f"decode's engine process died (exit code {code})")

    def _deliver(self, msg: Inward) -> None:
        if self.writer is None or self.writer.is_closing():
            return
        data = self._encoder.encode(msg)
        header = (
            struct.pack("!i", len(data)) if len(data) < 2**31 else struct.pack("!iQ", -1, len(data))
        )
        self.writer.write(header + data)  # buffered: never blocks the event loop

    async def _exit_code(self, timeout_s: float = 5.0) -> int | None:
        if self.proc is None:
            return None
        await asyncio.get_running_loop().run_in_executor(None, self.proc.join, timeout_s)
        return self.proc.exitcode

    async def close(self) -> None:
        self.closing = True
        if self.writer is not None:
            self._pending = None
            with contextlib.suppress(Exception):
                self._deliver(Inward(stop=True))
                await self.writer.drain()
        if self._reading is not None:  # ends at the core's EOF: it logged its totals by then
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await asyncio.wait_for(self._reading, 30)
        if self.proc is not None and (await self._exit_code(10)) is None:
            log.warning("decode's engine process did not stop; killing it")
            self.proc.kill()
            await self._exit_code()
        if self.writer is not None:
            self.writer.close()


def make_core(worker: EngineStageWorker, verdict_stream: str, on_tick, on_death) -> CoreClient:
    mode = worker.config.decode_core
    if mode == "thread":
        return ThreadCore(worker, verdict_stream, on_tick, on_death)
    return ProcessCore(worker.config, worker.worker_id, verdict_stream, on_tick, on_death)
