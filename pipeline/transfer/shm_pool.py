"""KV handoff in place: the prefill engine's whole block pool lives in POSIX shared memory.

The copying transport (shm.py) gathers a sequence's KV into a buffer that the decode worker
then scatters out of: every byte moves twice. Here the prefill worker's pool is one shared
segment instead. A handoff pins the sequence's blocks (they outlive the sequence until the
decode worker acks or the lease expires) and names them; the decode worker maps the segment
once and copies those blocks straight into its own pool: one copy.

Segment layout: a 64-byte header (magic, num_blocks), one int64 generation per block (the
engine's BlockManager bumps a block's generation whenever it takes the block for new content),
then the pool [layers, 2, kv_heads, num_blocks, block_size, head_dim] at a 4 KiB boundary. A
reader checks the generations of its blocks before and after copying; a block reused in
between (its lease expired, or the exporter restarted) makes the read TransferExpiredError,
and decode prefills again. If the exporter dies, Python's resource tracker unlinks the segment.
"""

from __future__ import annotations

import contextlib
import itertools
import secrets
import struct
from collections.abc import Iterator, MutableSequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import shared_memory

import torch

from pipeline.transfer.base import TransferExpiredError, now_ms
from pipeline.transfer.shm import Attachments, segment_tag

HEADER = 64
_MAGIC = 0x53545050  # "STPP"
_FMT = "<Iq"  # magic, num_blocks
_ALIGN = 4096


def data_offset(num_blocks: int) -> int:
    """Where the pool starts in a segment of `num_blocks` blocks (after header, generations)."""
    return -(-(HEADER + 8 * num_blocks) // _ALIGN) * _ALIGN


def _generations(seg: shared_memory.SharedMemory, num_blocks: int) -> memoryview:
    return seg.buf[HEADER : HEADER + 8 * num_blocks].cast("q")


class SharedKVPool:
    """The exporter's segment. `storage` is an Engine `kv_storage`: the engine's pool and its
    block generations are then this segment."""

    def __init__(self) -> None:
        self.segment: shared_memory.SharedMemory | None = None
        self._mapping: tuple[object, object] | None = None
        self.address = 0  # of the segment's mapping here (what a transfer engine registers)

    @property
    def name(self) -> str:
        if self.segment is None:
            raise RuntimeError("the pool has no segment yet (no engine was built on it)")
        return self.segment.name

    def storage(
        self, num_blocks: int, numel: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, MutableSequence[int]]:
        if self.segment is not None:
            raise RuntimeError("one engine per shared pool")
        offset = data_offset(num_blocks)
        seg = shared_memory.SharedMemory(
            name=f"{segment_tag()}pool_{secrets.token_hex(4)}",
            create=True,
            size=offset + numel * dtype.itemsize,
        )  # a new segment reads as zeros, as an engine's pool starts
        struct.pack_into(_FMT, seg.buf, 0, _MAGIC, num_blocks)
        self.segment = seg
        kv = torch.frombuffer(seg.buf, dtype=dtype, count=numel, offset=offset)
        self.address = kv.data_ptr() - offset
        return kv, _generations(seg, num_blocks)

    def close(self) -> None:
        """Unlink the segment. The engine's pool and generations keep the mapping until they
        go; readers that already map it finish their copies."""
        seg = self.segment
        if seg is None:
            return
        with contextlib.suppress(FileNotFoundError):
            seg.unlink()
        # The engine's views still point into the mapping, so SharedMemory cannot close it
        # (and its __del__ would raise trying): hand the mapping to this object, which keeps
        # it until the views are gone, and let SharedMemory close only its descriptor.
        self._mapping = (seg._buf, seg._mmap)  # type: ignore[attr-defined]
        seg._buf = seg._mmap = None  # type: ignore[attr-defined]
        seg.close()
        self.segment = None


class PoolReader:
    """The importer's side: maps exporters' pools once and reads pinned blocks out of them."""

    def __init__(self, max_attached: int = 8) -> None:
        self._attached = Attachments(max_attached)
        # Pools that did not map here: asked again for every waiting handoff on each of
        # decode's polls, and a failed shm_open costs ~10 us. A name never comes back (each
        # pool's has random bytes), so a miss stays a miss.
        self._elsewhere: set[str] = set()

    def holds(self, name: str, num_blocks: int) -> bool:
        """Whether pool segment `name` of `num_blocks` blocks can be mapped here (prefill on this
        host, in this IPC namespace); else a transport across hosts has to bring its blocks."""
        if name in self._elsewhere:
            return False
        try:
            seg = self._attached.get(name)
        except TransferExpiredError:
            if len(self._elsewhere) >= 1024:  # a bound: prefill pools come and go over days
                self._elsewhere.clear()
            self._elsewhere.add(name)
            return False
        magic, blocks = struct.unpack_from(_FMT, seg.buf, 0)
        return magic == _MAGIC and blocks == num_blocks

    @contextmanager
    def read(
        self,
        name: str,
        dtype: torch.dtype,
        block_shape: tuple[int, int, int, int, int],  # (layers, 2, kv_heads, block_size, D)
        blocks: list[int],
        generations: list[int],
    ) -> Iterator[torch.Tensor]:
        """The exporter's pool [L, 2, KVH, num_blocks, bs, D], while `blocks` still hold
        `generations`; copy out of it inside the block."""
        seg = self._attached.get(name)
        magic, num_blocks = struct.unpack_from(_FMT, seg.buf, 0)
        layers, two, kvh, bs, d = block_shape
        numel = layers * two * kvh * num_blocks * bs * d
        offset = data_offset(num_blocks)
        if magic != _MAGIC or offset + numel * dtype.itemsize > seg.size:
            raise TransferExpiredError(f"KV segment {name} is not a pool of this shape")
        if len(blocks) != len(generations) or any(not 0 <= b < num_blocks for b in blocks):
            raise TransferExpiredError(f"KV blocks {blocks} are not in pool {name}")
        gens = _generations(seg, num_blocks)
        try:
            self._check(gens, blocks, generations, name, "")
            pool = torch.frombuffer(seg.buf, dtype=dtype, count=numel, offset=offset)
            try:
                yield pool.view(layers, two, kvh, num_blocks, bs, d)
            finally:
                del pool
            self._check(gens, blocks, generations, name, " during the copy")  # torn?
        finally:
            gens.release()

    @staticmethod
    def _check(gens: memoryview, blocks: list[int], expected: list[int], name: str, when: str):
        if any(gens[b] != g for b, g in zip(blocks, expected, strict=True)):
            raise TransferExpiredError(f"KV blocks of {name} were reused{when}")

    def close(self) -> None:
        self._attached.close()


def segment_of(handle: str) -> str:
    """The pool segment a `PinLeases` handle names."""
    return handle.partition("#")[0]


@dataclass(slots=True)
class _Pin:
    blocks: list[int]
    expires_ms: int


class PinLeases:
    """The exporter's pinned handoffs: bounded in blocks, released on ack or lease expiry.

    Pure bookkeeping (the engine pins and unpins): every call that returns blocks hands them
    back for `Engine.unpin_kv`.
    """

    def __init__(self, max_blocks: int, lease_ms: int = 30_000) -> None:
        self.max_blocks = max_blocks
        self.lease_ms = lease_ms
        self._pins: dict[str, _Pin] = {}
        self._ids = itertools.count(1)
        self.num_blocks = 0
        self.num_expired = 0

    @property
    def num_live(self) -> int:
        return len(self._pins)

    def can_pin(self, num_blocks: int) -> bool:
        return self.num_blocks + num_blocks <= self.max_blocks

    def add(self, segment: str, blocks: list[int]) -> tuple[str, int]:
        """A lease on `blocks` (already pinned): (handle, expires_ms)."""
        handle = f"{segment}#{next(self._ids)}"  # segment_of() reads it back
        expires = now_ms() + self.lease_ms
        self._pins[handle] = _Pin(blocks, expires)
        self.num_blocks += len(blocks)
        return handle, expires

    def ack(self, handle: str) -> list[int]:
        """The importer has its copy; [] if the lease was already gone."""
        pin = self._pins.pop(handle, None)
        if pin is None:
            return []
        self.num_blocks -= len(pin.blocks)
        return pin.blocks

    def reap(self, at_ms: int | None = None) -> list[int]:
        """Blocks of every expired lease."""
        t = now_ms() if at_ms is None else at_ms
        expired = [h for h, pin in self._pins.items() if pin.expires_ms <= t]
        self.num_expired += len(expired)
        return [b for h in expired for b in self.ack(h)]

    def release_all(self) -> list[int]:
        return [b for h in list(self._pins) for b in self.ack(h)]
