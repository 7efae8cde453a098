"""CUDA IPC transport (GPU, same node): export buffers stay on the exporter's device.

The handle carries torch's own `reduce_tensor` arguments for the buffer, encoded as msgpack
(never pickle: the handle travels through Kafka, and unpickling a message would let anyone
who can publish run code). The importer rebuilds a tensor that aliases the exporter's memory
(`rebuild_cuda_tensor`) and copies out of it before acking; the exporter keeps the buffer
alive until then (the pool's lease).

CUDA cannot open an IPC handle in the process that made it (`cudaIpcOpenMemHandle` answers
"invalid device context": found on the first GPU run, 2026-12-04), so a handle names its
exporter's pid, and an importer in that same process (prefill and decode in one process) reads
the exporter's buffer directly.
"""

from __future__ import annotations

import base64
import itertools
import os
from collections.abc import Iterator
from contextlib import contextmanager

import msgspec
import torch

from pipeline.errors import StepwiseError
from pipeline.transfer.base import KVHandle, TransferExpiredError, dtype_name

# reduce_tensor(cuda tensor) -> (rebuild_cuda_tensor, args) with args, in torch >= 2.0:
# (tensor_cls, size, stride, offset, storage_cls, dtype, device, handle, storage_size_bytes,
#  storage_offset_bytes, requires_grad, ref_counter_handle, ref_counter_offset, event_handle,
#  event_sync_required). The two classes are always Tensor / UntypedStorage here.
_CLASS_SLOTS = (0, 4)

# This process's live exports by handle, across transport instances (an importer in the same
# process may hold another instance than the exporter's pool), and one counter so that two
# instances never mint the same handle.
_LOCAL_EXPORTS: dict[str, torch.Tensor] = {}
_COUNTER = itertools.count()


def encode_ipc_args(args: tuple) -> str:
    fields = list(args)
    for i in _CLASS_SLOTS:
        fields[i] = None
    fields[1], fields[2] = list(fields[1]), list(fields[2])
    fields[5] = dtype_name(fields[5])
    return base64.b64encode(msgspec.msgpack.encode(fields)).decode()


def decode_ipc_args(handle: str) -> tuple:
    try:
        fields = msgspec.msgpack.decode(base64.b64decode(handle, validate=True))
    except (ValueError, msgspec.DecodeError) as e:
        raise TransferExpiredError(f"malformed CUDA IPC handle: {e}") from e
    if not isinstance(fields, list) or len(fields) != 15:
        raise TransferExpiredError("malformed CUDA IPC handle: wrong field count")
    fields[0], fields[4] = torch.Tensor, torch.UntypedStorage
    fields[1], fields[2] = torch.Size(fields[1]), tuple(fields[2])
    fields[5] = getattr(torch, fields[5])
    return tuple(fields)


class CudaIpcTransport:
    name = "cuda_ipc"

    def __init__(self, device: str | torch.device = "cuda") -> None:
        if not torch.cuda.is_available():
            raise StepwiseError(
                "the cuda_ipc transport needs a CUDA device; use shm", code="no_cuda"
            )
        self.device = torch.device(device)

    def allocate(self, shape: tuple[int, ...], dtype: torch.dtype) -> tuple[str, torch.Tensor]:
        from torch.multiprocessing.reductions import reduce_tensor

        buf = torch.empty(shape, dtype=dtype, device=self.device)
        _, args = reduce_tensor(buf)
        handle = f"{os.getpid()}.{next(_COUNTER)}:{encode_ipc_args(args)}"
        _LOCAL_EXPORTS[handle] = buf
        return handle, buf

    def release(self, handle: str) -> None:
        _LOCAL_EXPORTS.pop(handle, None)

    @contextmanager
    def attach(self, handle: KVHandle) -> Iterator[torch.Tensor]:
        from torch.multiprocessing.reductions import rebuild_cuda_tensor

        local = _LOCAL_EXPORTS.get(handle.handle)
        if local is not None:  # exported by this process: no IPC (CUDA refuses it)
            yield local
            return
        args = decode_ipc_args(handle.handle.partition(":")[2])
        try:
            tensor = rebuild_cuda_tensor(*args)
        except RuntimeError as e:
            raise TransferExpiredError(f"CUDA IPC handle no longer valid: {e}") from e
        try:
            yield tensor
        finally:
            del tensor
