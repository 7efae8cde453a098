"""The transport interface, handles, and the exporter's bounded pool of leased buffers.

An exporter (prefill worker) asks the pool for a buffer, fills it (the engine gathers a
sequence's KV straight into it), publishes the handle, and keeps the buffer alive until the
importer acks or the lease expires. The pool is bounded in bytes: when it is full the
exporter must stop taking work (backpressure), not buffer without bound.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import torch

from pipeline.errors import StepwiseError

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


class TransferExpiredError(StepwiseError):
    """The exported buffer is gone (lease expired, exporter died): re-prefill instead."""

    code = "transfer_expired"


class ExportPoolFullError(StepwiseError):
    """No room for another export until importers ack or leases expire."""

    code = "export_pool_full"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(slots=True, frozen=True)
class KVHandle:
    """Everything an importer needs to find and interpret an exported KV buffer."""

    transport: str  # "shm" | "cuda_ipc"
    handle: str  # transport-specific address (shm name, serialized IPC handle)
    shape: tuple[int, ...]  # [layers, 2, kv_heads, tokens, head_dim]
    dtype: str
    nbytes: int
    owner: str  # exporting worker id
    expires_ms: int

    @property
    def torch_dtype(self) -> torch.dtype:
        return _DTYPES[self.dtype]

    @property
    def num_tokens(self) -> int:
        return self.shape[3]


def torch_dtype(name: str) -> torch.dtype:
    return _DTYPES[name]


def dtype_itemsize(name: str) -> int:
    return _DTYPES[name].itemsize


def dtype_name(dtype: torch.dtype) -> str:
    for name, dt in _DTYPES.items():
        if dt == dtype:
            return name
    raise ValueError(f"unsupported KV dtype {dtype}")


class Transport(Protocol):
    name: str

    def allocate(
        self, shape: tuple[int, ...], dtype: torch.dtype
    ) -> tuple[str, torch.Tensor]:  # (handle, writable tensor)
        ...

    def release(self, handle: str) -> None: ...

    def attach(self, handle: KVHandle) -> Iterator[torch.Tensor]: ...


@dataclass(slots=True)
class _Lease:
    handle: KVHandle
    buffer: torch.Tensor


class ExportPool:
    """Bounded set of live exports with leases; ack() or expiry releases a buffer."""

    def __init__(self, transport: Transport, owner: str, max_bytes: int, lease_ms: int = 30_000):
        self.transport = transport
        self.owner = owner
        self.max_bytes = max_bytes
        self.lease_ms = lease_ms
        self._leases: dict[str, _Lease] = {}
        self.used_bytes = 0
        self.num_expired = 0

    @property
    def num_live(self) -> int:
        return len(self._leases)

    def can_export(self, nbytes: int) -> bool:
        return self.used_bytes + nbytes <= self.max_bytes

    def export(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[KVHandle, torch.Tensor]:
        """A fresh leased buffer of `shape`; fill it, then publish the returned handle."""
        nbytes = dtype.itemsize
        for s in shape:
            nbytes *= s
        if nbytes > self.max_bytes:
            raise ExportPoolFullError(
                f"an export of {nbytes} bytes exceeds the pool ({self.max_bytes} bytes)"
            )
        if not self.can_export(nbytes):
            self.reap()
            if not self.can_export(nbytes):
                raise ExportPoolFullError(
                    f"export pool full: {self.used_bytes} of {self.max_bytes} bytes leased"
                )
        address, buffer = self.transport.allocate(shape, dtype)
        handle = KVHandle(
            self.transport.name,
            address,
            tuple(shape),
            dtype_name(dtype),
            nbytes,
            self.owner,
            now_ms() + self.lease_ms,
        )
        self._leases[address] = _Lease(handle, buffer)
        self.used_bytes += nbytes
        return handle, buffer

    def ack(self, address: str) -> bool:
        """The importer has its copy: release the buffer. False if it was already gone."""
        lease = self._leases.pop(address, None)
        if lease is None:
            return False
        self._free(lease)
        return True

    def reap(self, at_ms: int | None = None) -> list[str]:
        """Release every buffer whose lease has expired; returns their addresses."""
        t = now_ms() if at_ms is None else at_ms
        expired = [a for a, lease in self._leases.items() if lease.handle.expires_ms <= t]
        for address in expired:
            self._free(self._leases.pop(address))
        self.num_expired += len(expired)
        return expired

    def close(self) -> None:
        for lease in self._leases.values():
            self._free(lease)
        self._leases.clear()
        close = getattr(self.transport, "close", None)
        if close is not None:  # e.g. unlink recycled shared-memory segments
            close()

    def _free(self, lease: _Lease) -> None:
        self.used_bytes -= lease.handle.nbytes
        lease.buffer = None  # drop the view before the transport unmaps it
        self.transport.release(lease.handle.handle)
