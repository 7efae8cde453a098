"""KV handoff transports: prefill exports a sequence's KV, decode imports it (docs/pipeline.md)."""

from pipeline.transfer.base import (
    ExportPool,
    ExportPoolFullError,
    KVHandle,
    TransferExpiredError,
    get_transport,
)

__all__ = ["ExportPool", "ExportPoolFullError", "KVHandle", "TransferExpiredError", "get_transport"]
