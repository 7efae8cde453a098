"""KV handoff transports: prefill exports a sequence's KV, decode imports it (DESIGN.md 6)."""

from pipeline.transfer.base import (
    ExportPool,
    ExportPoolFullError,
    KVHandle,
    TransferExpiredError,
    get_transport,
)

__all__ = ["ExportPool", "ExportPoolFullError", "KVHandle", "TransferExpiredError", "get_transport"]
