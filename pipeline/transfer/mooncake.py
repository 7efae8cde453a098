"""KV across hosts: prefill's shared pool served by Mooncake's transfer engine, read by decode.

The `mooncake` transport is `shm_pool` plus a network path. The prefill worker's pool is the
same shared-memory segment (shm_pool.py); its worker also starts a Mooncake TransferEngine (TCP,
peers found by P2P handshake: no metadata server) and registers the whole segment once. A
handoff's descriptor then also names the engine's session ("host:rpc_port"), the segment's
address there and its size in blocks. A decode worker that can map the segment reads it in
place as before; one that cannot (another host, another IPC namespace), or that is told to
(`STEPWISE_KV_TRANSPORT=mooncake`), reads the blocks with one batched read into a staging pool
it registered once, then imports them into its engine from there.

The generations are read remotely too, before the copy and after it (as PoolReader does in
place): generations only grow, so if the blocks still hold the handoff's generations after the
copy, nothing reused them meanwhile. Every read has a deadline (`STEPWISE_KV_READ_TIMEOUT_MS`):
the engine's own calls block (up to its MC_TRANSFER_TIMEOUT, 5 s at least, on a peer that
stopped answering), so they run on a thread of their own and decode stops waiting at the
deadline; until that call returns, later reads fail at once (the staging pool is still being
written). Any failure is a TransferExpiredError: decode prefills the prompt again.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from queue import SimpleQueue

import torch

from pipeline.errors import StepwiseError
from pipeline.transfer.base import TransferExpiredError
from pipeline.transfer.shm_pool import HEADER, data_offset

PACKAGE = "mooncake-transfer-engine-non-cuda==0.3.13.post1"  # GPU hosts: mooncake-transfer-engine
MAX_BLOCKS = 1 << 16  # a descriptor's most blocks (schema.KVDescriptor)
GENS_AREA = 8 * MAX_BLOCKS  # the staging buffer starts with room for that many generations
# Mooncake's own bound on a blocking call to a peer that stopped answering (seconds; it takes
# no less than 5). Decode's deadline is shorter; this only bounds how long the call holds on.
ENGINE_TIMEOUT_S = "5"


class MooncakeUnavailableError(StepwiseError):
    """The transfer engine cannot be imported or started here."""

    code = "mooncake_unavailable"


class TransferTimeoutError(TransferExpiredError):
    """A remote KV read passed its deadline (or an earlier one still holds the engine)."""

    code = "transfer_timeout"


def engine_class() -> type:
    """Mooncake's TransferEngine, or an error that says what to install."""
    try:
        from mooncake.engine import TransferEngine
    except ImportError as e:  # the wheel, or libibverbs.so.1 that it links against
        raise MooncakeUnavailableError(
            f"KV transport mooncake needs the {PACKAGE} wheel (pip install 'stepwise[mooncake]')"
            f" and the libibverbs1 system package (apt-get install libibverbs1): {e}"
        ) from e
    return TransferEngine


def available() -> bool:
    try:
        engine_class()
    except MooncakeUnavailableError:
        return False
    return True


def default_host() -> str:
    """This host's address as other hosts know it: its name's, unless that is loopback (Debian
    maps the name to 127.0.1.1), then the address of the interface its default route leaves by
    (a UDP socket's connect sends nothing), else loopback."""
    try:
        named = socket.gethostbyname(socket.gethostname())
    except OSError:
        named = "127.0.0.1"
    if not named.startswith("127."):
        return named
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: any routable address does
            return s.getsockname()[0]
    except OSError:
        return named


def start_engine(host: str) -> tuple[object, str]:
    """A TCP transfer engine listening on `host`: (engine, its session "host:rpc_port")."""
    cls = engine_class()
    os.environ.setdefault("MC_TRANSFER_TIMEOUT", ENGINE_TIMEOUT_S)  # read as the engine is made
    host = host or default_host()
    engine = cls()
    # The port is the engine's choice (it ignores one in the name unless in its legacy mode).
    if engine.initialize(host, "P2PHANDSHAKE", "tcp", "") != 0:
        raise MooncakeUnavailableError(f"the Mooncake transfer engine did not start on {host}")
    return engine, f"{host}:{engine.get_rpc_port()}"


def register(engine, address: int, nbytes: int) -> None:
    if engine.register_memory(address, nbytes) != 0:
        raise MooncakeUnavailableError(f"Mooncake could not register {nbytes} bytes")


# -- where the bytes are ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PoolLayout:
    """Byte offsets in a KV pool [layers, 2, kv_heads, num_blocks, block_size, head_dim] that
    starts `start` bytes into its buffer. A block is one chunk per plane (layer, K/V, head)."""

    planes: int  # layers * 2 * kv_heads
    num_blocks: int
    block_bytes: int  # block_size * head_dim * itemsize: one block of one plane
    start: int

    @classmethod
    def of(
        cls, block_shape: tuple[int, ...], itemsize: int, num_blocks: int, start: int
    ) -> PoolLayout:
        layers, two, kv_heads, block_size, head_dim = block_shape
        return cls(layers * two * kv_heads, num_blocks, block_size * head_dim * itemsize, start)

    @classmethod
    def segment(cls, block_shape: tuple[int, ...], itemsize: int, num_blocks: int) -> PoolLayout:
        """An exporter's pool segment (shm_pool.py: after the header and the generations)."""
        return cls.of(block_shape, itemsize, num_blocks, data_offset(num_blocks))

    @property
    def nbytes(self) -> int:
        return self.start + self.planes * self.num_blocks * self.block_bytes

    def offset(self, plane: int, block: int) -> int:
        return self.start + (plane * self.num_blocks + block) * self.block_bytes


def runs(blocks: list[int]) -> list[tuple[int, int]]:
    """(first, count) of each run of consecutive block ids, in the table's order."""
    out: list[tuple[int, int]] = []
    for b in blocks:
        if out and out[-1][0] + out[-1][1] == b:
            out[-1] = (out[-1][0], out[-1][1] + 1)
        else:
            out.append((b, 1))
    return out


Plan = tuple[list[int], list[int], list[int]]  # remote offsets, local offsets, lengths


def copy_plan(src: PoolLayout, blocks: list[int], dst: PoolLayout) -> Plan:
    """`blocks` of `src` into blocks 0..len(blocks)-1 of `dst`: one chunk per run and plane."""
    remote, local, lengths = [], [], []
    to = 0
    for first, count in runs(blocks):
        for plane in range(src.planes):
            remote.append(src.offset(plane, first))
            local.append(dst.offset(plane, to))
            lengths.append(count * src.block_bytes)
        to += count
    return remote, local, lengths


def generations_plan(blocks: list[int]) -> Plan:
    """The blocks' int64 generations (after the segment's header) into 0..8*len(blocks)."""
    remote, local, lengths = [], [], []
    to = 0
    for first, count in runs(blocks):
        remote.append(HEADER + 8 * first)
        local.append(8 * to)
        lengths.append(8 * count)
        to += count
    return remote, local, lengths


# -- prefill: the pool served -------------------------------------------------------------


class MooncakeServer:
    """Prefill's engine: serves one registered region, the shared pool's segment."""

    def __init__(self, host: str) -> None:
        self.engine, self.session = start_engine(host)
        self.address = 0

    def serve(self, address: int, nbytes: int) -> None:
        register(self.engine, address, nbytes)
        self.address = address

    def close(self) -> None:
        if self.address and self.engine is not None:
            self.engine.unregister_memory(self.address)  # type: ignore[attr-defined]
        self.address = 0


# -- decode: reads with a deadline --------------------------------------------------------


class _Caller:
    """Runs blocking engine calls one at a time on a daemon thread, so a caller can stop
    waiting (a stuck call never holds up the process's exit)."""

    def __init__(self) -> None:
        self._jobs: SimpleQueue[tuple[Future, Callable[[], int]] | None] = SimpleQueue()
        self.busy: Future | None = None
        threading.Thread(target=self._run, name="mooncake-read", daemon=True).start()

    def _run(self) -> None:
        while (job := self._jobs.get()) is not None:
            fut, fn = job
            try:
                fut.set_result(fn())
            except BaseException as e:  # handed to the waiting caller
                fut.set_exception(e)
            del job, fut, fn  # what the call held goes with it

    def close(self) -> None:
        self._jobs.put(None)  # the thread ends after the call it is in, if any

    def submit(self, fn: Callable[[], object]) -> Future:
        """Queue fn(); its Future (the call is `busy` until done)."""
        fut: Future = Future()
        self.busy = fut
        self._jobs.put((fut, fn))
        return fut

    def call(self, fn: Callable[[], int], timeout_s: float) -> int:
        """fn()'s result; FutureTimeout after `timeout_s` (the call goes on, `busy` until done)."""
        return self.submit(fn).result(timeout=max(0.0, timeout_s))


@dataclass(slots=True)
class PendingRead:
    """A read started by `MooncakeReader.begin`: done when its future is, late at `deadline`."""

    future: Future
    deadline: float  # time.monotonic()
    session: str
    shape: tuple[int, ...]  # the staged pool's [L, 2, KVH, capacity, bs, D]
    dtype: torch.dtype
    start: int  # the pool's first byte in the staging buffer
    nbytes: int

    @property
    def ready(self) -> bool:
        """Done, or past its deadline (finish() then says which)."""
        return self.future.done() or time.monotonic() >= self.deadline


class MooncakeReader:
    """Decode's engine: reads lent blocks from exporters' sessions into a staging pool
    registered once (grown when a sequence needs more), each read under `timeout_ms`."""

    def __init__(self, host: str, timeout_ms: int) -> None:
        engine_class()  # fails now, with what to install, not at the first handoff
        self.host = host
        self.timeout_s = timeout_ms / 1000
        self.engine: object | None = None
        self.staging: torch.Tensor | None = None
        self._caller = _Caller()

    def read(
        self,
        session: str,
        pool_addr: int,
        pool_blocks: int,
        dtype: torch.dtype,
        block_shape: tuple[int, int, int, int, int],  # (layers, 2, kv_heads, block_size, D)
        blocks: list[int],
        generations: list[int],
    ) -> torch.Tensor:
        """A pool [L, 2, KVH, capacity, bs, D] whose first len(blocks) blocks are `blocks`
        of the exporter's pool, read while they still held `generations`. Valid until the
        next read."""
        return self.finish(
            self.begin(session, pool_addr, pool_blocks, dtype, block_shape, blocks, generations)
        )

    def begin(
        self,
        session: str,
        pool_addr: int,
        pool_blocks: int,
        dtype: torch.dtype,
        block_shape: tuple[int, int, int, int, int],
        blocks: list[int],
        generations: list[int],
    ) -> PendingRead:
        """Start `read` on the reader's thread and return at once (the engine goes on stepping
        meanwhile: Mooncake's call lets go of the GIL); `finish` takes the staged pool. One
        read at a time: the staging pool holds one sequence."""
        if len(blocks) != len(generations) or not 0 < len(blocks) <= MAX_BLOCKS:
            raise TransferExpiredError(f"KV blocks {blocks} do not match their generations")
        if any(not 0 <= b < pool_blocks for b in blocks):
            raise TransferExpiredError(f"KV blocks {blocks} are not in the pool at {session}")
        deadline = time.monotonic() + self.timeout_s
        src = PoolLayout.segment(block_shape, dtype.itemsize, pool_blocks)
        dst = self._staging_for(block_shape, dtype.itemsize, len(blocks))
        self._wait_idle()
        engine, staging = self.engine, self.staging
        assert staging is not None
        gens, data = generations_plan(blocks), copy_plan(src, blocks, dst)

        def read_all() -> None:  # on the reader's thread
            # The generations before and after the copy: blocks still holding them were not
            # reused meanwhile (generations only grow).
            _read(engine, staging, session, pool_addr, gens)
            _expect(staging, generations, session, "")
            _read(engine, staging, session, pool_addr, data)
            _read(engine, staging, session, pool_addr, gens)
            _expect(staging, generations, session, " during the copy")

        layers, two, kv_heads, block_size, head_dim = block_shape
        shape = (layers, two, kv_heads, dst.num_blocks, block_size, head_dim)
        future = self._caller.submit(read_all)
        return PendingRead(future, deadline, session, shape, dtype, dst.start, dst.nbytes)

    def finish(self, pending: PendingRead) -> torch.Tensor:
        """The pool `begin` staged, once its read is done (waiting at most to its deadline);
        TransferTimeoutError past it, TransferExpiredError if it failed."""
        try:
            pending.future.result(timeout=max(0.0, pending.deadline - time.monotonic()))
        except FutureTimeout:
            ms = int(self.timeout_s * 1000)
            raise TransferTimeoutError(
                f"KV read from {pending.session} passed its {ms} ms deadline"
            ) from None
        assert self.staging is not None
        pool = self.staging[pending.start : pending.nbytes].view(pending.dtype)
        return pool.view(*pending.shape)

    def _staging_for(self, block_shape: tuple[int, ...], itemsize: int, n: int) -> PoolLayout:
        """The staging pool's layout, with room for `n` blocks (the buffer grown if not)."""
        if self.engine is None:
            self.engine, _ = start_engine(self.host)
        unit = PoolLayout.of(block_shape, itemsize, 1, GENS_AREA)
        per_block = unit.planes * unit.block_bytes
        have = 0 if self.staging is None else (self.staging.numel() - GENS_AREA) // per_block
        if have < n:
            self._wait_idle()  # an abandoned read may still be writing the old buffer
            have = max(n, 2 * have, 16)
            buf = torch.empty(GENS_AREA + have * per_block, dtype=torch.uint8)
            register(self.engine, buf.data_ptr(), buf.numel())
            if self.staging is not None:
                self.engine.unregister_memory(self.staging.data_ptr())  # type: ignore[attr-defined]
            self.staging = buf
        return PoolLayout.of(block_shape, itemsize, have, GENS_AREA)

    def _wait_idle(self) -> None:
        busy = self._caller.busy
        if busy is not None and not busy.done():
            raise TransferTimeoutError("an earlier KV read that passed its deadline is still on")

    def close(self) -> None:
        self._caller.close()
        busy = self._caller.busy
        if self.engine is not None and self.staging is not None and (busy is None or busy.done()):
            self.engine.unregister_memory(self.staging.data_ptr())  # type: ignore[attr-defined]
        self.staging = None  # (a call still on holds its buffer until it ends)


def _read(engine, staging: torch.Tensor, session: str, base: int, plan: Plan) -> None:
    """One batched read of `plan` from `session` into `staging` (on the reader's thread: the
    call holds the engine and the buffer it writes, so a call abandoned at its deadline never
    finds them freed)."""
    local = [staging.data_ptr() + off for off in plan[1]]
    remote = [base + off for off in plan[0]]
    if engine.batch_transfer_sync_read(session, local, remote, plan[2]) != 0:
        raise TransferExpiredError(f"KV read from {session} failed (exporter gone?)")


def _expect(staging: torch.Tensor, expected: list[int], session: str, when: str) -> None:
    got = staging[: 8 * len(expected)].view(torch.int64).tolist()
    if got != list(expected):
        raise TransferExpiredError(f"KV blocks at {session} were reused{when}")
