"""POSIX shared-memory transport (CPU, same host).

The exporter leases a segment per export and the engine gathers the KV straight into it; the
importer maps it, scatters it into its own KV pool, and acks. Creating and first-touching a
segment costs a page fault per 4 KiB (more than the copy itself), so both sides keep their
mappings: the exporter recycles released segments, the importer caches attachments. Each
segment starts with a small header holding the current lease id; a handle names the lease, so
an importer holding a stale handle (lease expired, segment recycled) gets TransferExpiredError
instead of someone else's KV. If the exporter dies, Python's resource tracker unlinks its
segments.
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import os
import secrets
import struct
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import resource_tracker, shared_memory

import torch

from pipeline.transfer.base import KVHandle, TransferExpiredError

HEADER = 64  # bytes: magic + lease id, padded so the data stays 64-byte aligned
_MAGIC = 0x53545057  # "STPW"
_FMT = "<Iq"
_GRANULE = 1 << 20  # segment sizes round up to 1 MiB, so released ones fit later exports


def segment_tag() -> str:
    """The prefix of every segment this process creates."""
    return f"sw{os.getpid()}_"


def _tracker_tags() -> tuple[str, ...]:
    """Tags of the processes whose segments this process's resource tracker holds: its own,
    and its parent's when multiprocessing started it (decode's engine core shares its worker's
    tracker, and in a test stack that worker's process is prefill's too)."""
    if multiprocessing.parent_process() is None:
        return (segment_tag(),)
    return segment_tag(), f"sw{os.getppid()}_"


class Attachments:
    """An importer's mappings of other processes' segments, by name, least recently used
    closed first: mapping a segment again costs a page fault per 4 KiB on the next copy."""

    def __init__(self, max_attached: int = 64) -> None:
        self.max_attached = max_attached
        self._segments: OrderedDict[str, shared_memory.SharedMemory] = OrderedDict()

    def get(self, name: str) -> shared_memory.SharedMemory:
        seg = self._segments.get(name)
        if seg is not None:
            self._segments.move_to_end(name)
            return seg
        try:
            seg = shared_memory.SharedMemory(name=name, create=False)
        except FileNotFoundError as e:
            raise TransferExpiredError(f"KV segment {name} is gone") from e
        # Attaching registers the segment with this process's resource tracker, which would
        # unlink it when this process exits (Python < 3.13): the exporter owns it, not us
        # (unless the exporter shares this tracker, whose registration must stay).
        if not name.startswith(_tracker_tags()):
            resource_tracker.unregister(seg._name, "shared_memory")  # type: ignore[attr-defined]
        self._segments[name] = seg
        while len(self._segments) > self.max_attached:
            _, old = self._segments.popitem(last=False)
            with contextlib.suppress(BufferError):
                old.close()
        return seg

    def close(self) -> None:
        for seg in self._segments.values():
            with contextlib.suppress(BufferError):
                seg.close()
        self._segments.clear()


def _lease_of(seg: shared_memory.SharedMemory) -> int:
    magic, lease = struct.unpack_from(_FMT, seg.buf, 0)
    return lease if magic == _MAGIC else -1


class ShmTransport:
    name = "shm"

    def __init__(self, max_free_bytes: int = 1 << 30, max_attached: int = 64) -> None:
        self._tag = f"{segment_tag()}{secrets.token_hex(3)}"
        self._names = itertools.count()
        self._leases = itertools.count(1)
        self._live: dict[str, shared_memory.SharedMemory] = {}  # handle -> leased segment
        self._free: list[shared_memory.SharedMemory] = []
        self._free_bytes = 0
        self.max_free_bytes = max_free_bytes
        self._attached = Attachments(max_attached)

    # -- exporter ---------------------------------------------------------------------------

    def allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[str, torch.Tensor]:
        numel = 1
        for s in shape:
            numel *= s
        need = HEADER + numel * dtype.itemsize
        seg = self._take_free(need)
        if seg is None:
            size = -(-need // _GRANULE) * _GRANULE
            seg = shared_memory.SharedMemory(
                name=f"{self._tag}_{next(self._names)}", create=True, size=size
            )
        lease = next(self._leases)
        struct.pack_into(_FMT, seg.buf, 0, _MAGIC, lease)
        handle = f"{seg.name}#{lease}"
        self._live[handle] = seg
        view = torch.frombuffer(seg.buf, dtype=dtype, count=numel, offset=HEADER)
        return handle, view.view(shape)

    def _take_free(self, need: int) -> shared_memory.SharedMemory | None:
        best = None
        for i, seg in enumerate(self._free):
            if seg.size >= need and (best is None or seg.size < self._free[best].size):
                best = i
        if best is None:
            return None
        seg = self._free.pop(best)
        self._free_bytes -= seg.size
        return seg

    def release(self, handle: str) -> None:
        seg = self._live.pop(handle, None)
        if seg is None:
            return
        struct.pack_into(_FMT, seg.buf, 0, _MAGIC, 0)  # stale handles now fail the check
        if self._free_bytes + seg.size <= self.max_free_bytes:
            self._free.append(seg)
            self._free_bytes += seg.size
        else:
            self._destroy(seg)

    @staticmethod
    def _destroy(seg: shared_memory.SharedMemory) -> None:
        # A view still alive somewhere keeps the mapping; unlinking still frees the name.
        with contextlib.suppress(BufferError):
            seg.close()
        with contextlib.suppress(FileNotFoundError):
            seg.unlink()

    def close(self) -> None:
        for seg in [*self._live.values(), *self._free]:
            self._destroy(seg)
        self._live.clear()
        self._free.clear()
        self._attached.close()

    # -- importer ---------------------------------------------------------------------------

    @contextmanager
    def attach(self, handle: KVHandle) -> Iterator[torch.Tensor]:
        """A view of the exported KV; valid only inside the block (copy out of it there)."""
        name, _, lease_s = handle.handle.partition("#")
        lease = int(lease_s) if lease_s.isdigit() else -2
        seg = self._attached.get(name)
        if _lease_of(seg) != lease:
            raise TransferExpiredError(f"KV lease {handle.handle} expired")
        numel = handle.nbytes // handle.torch_dtype.itemsize
        if HEADER + handle.nbytes > seg.size:
            raise TransferExpiredError(f"KV segment {name} is smaller than the handle says")
        tensor = torch.frombuffer(seg.buf, dtype=handle.torch_dtype, count=numel, offset=HEADER)
        try:
            yield tensor.view(handle.shape)
        finally:
            del tensor
        if _lease_of(seg) != lease:  # recycled while we copied: what we read may be torn
            raise TransferExpiredError(f"KV lease {handle.handle} expired during the copy")
