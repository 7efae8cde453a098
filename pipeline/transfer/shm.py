"""POSIX shared-memory transport (CPU, same host).

The exporter creates a segment per export and the engine gathers the KV straight into it; the
importer maps it, scatters it into its own KV pool, unmaps, and acks. If the exporter dies,
Python's resource tracker unlinks its segments, and importers see TransferExpiredError.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from multiprocessing import resource_tracker, shared_memory

import torch

from pipeline.transfer.base import KVHandle, TransferExpiredError


class ShmTransport:
    name = "shm"

    def __init__(self) -> None:
        self._segments: dict[str, shared_memory.SharedMemory] = {}
        self._tag = f"sw{os.getpid()}_{secrets.token_hex(3)}"
        self._counter = itertools.count()

    def allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[str, torch.Tensor]:
        numel = 1
        for s in shape:
            numel *= s
        name = f"{self._tag}_{next(self._counter)}"
        seg = shared_memory.SharedMemory(
            name=name, create=True, size=max(1, numel * dtype.itemsize)
        )
        self._segments[name] = seg
        tensor = torch.frombuffer(seg.buf, dtype=dtype, count=numel).view(shape)
        return name, tensor

    def release(self, handle: str) -> None:
        seg = self._segments.pop(handle, None)
        if seg is None:
            return
        # A view still alive somewhere keeps the mapping; unlinking still frees the name.
        with contextlib.suppress(BufferError):
            seg.close()
        seg.unlink()

    @contextmanager
    def attach(self, handle: KVHandle) -> Iterator[torch.Tensor]:
        try:
            seg = shared_memory.SharedMemory(name=handle.handle, create=False)
        except FileNotFoundError as e:
            raise TransferExpiredError(f"KV segment {handle.handle} is gone") from e
        # Attaching registers the segment with this process's resource tracker, which would
        # unlink it when this process exits (Python < 3.13): the exporter owns it, not us.
        resource_tracker.unregister(seg._name, "shared_memory")  # type: ignore[attr-defined]
        numel = handle.nbytes // handle.torch_dtype.itemsize
        tensor = torch.frombuffer(seg.buf, dtype=handle.torch_dtype, count=numel).view(handle.shape)
        try:
            yield tensor
        finally:
            del tensor
            seg.close()
