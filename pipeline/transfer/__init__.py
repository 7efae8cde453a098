"""KV handoff transports: prefill exports a sequence's KV, decode imports it (docs/pipeline.md).
`base.py` the interface and the export pool, `shm.py` and `cuda_ipc.py` the copying transports
(`get_transport` picks one), `shm_pool.py` blocks lent in place, `mooncake.py` across hosts."""

from pipeline.transfer.base import (
    ExportPool,
    ExportPoolFullError,
    KVHandle,
    TransferExpiredError,
    Transport,
)
from pipeline.transfer.cuda_ipc import CudaIpcTransport
from pipeline.transfer.shm import ShmTransport

TRANSPORTS = {"shm": ShmTransport, "cuda_ipc": CudaIpcTransport}


def get_transport(name: str) -> Transport:
    if name not in TRANSPORTS:
        raise ValueError(f"unknown KV transport {name!r} ({', '.join(TRANSPORTS)})")
    return TRANSPORTS[name]()


__all__ = [
    "TRANSPORTS",
    "ExportPool",
    "ExportPoolFullError",
    "KVHandle",
    "TransferExpiredError",
    "Transport",
    "get_transport",
]
