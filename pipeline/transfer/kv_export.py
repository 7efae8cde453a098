"""How a prefill worker hands a sequence's KV to decode: lend its blocks, or copy them out.

* `PinnedExporter` (transport `shm_pool`): the engine's whole pool lives in shared memory; a
  handoff pins the sequence's blocks and names them, and decode copies them straight into its
  own pool (one copy). The pins are bounded: the engine's pool is `export_pool_mb` bigger than
  a plain engine's, and pins never take more than that part, so prefill always has its usual
  room to work.
* `mooncake`: `shm_pool`, and the pool also served by Mooncake's transfer engine, registered
  once: a decode worker on another host reads the pinned blocks over the network (mooncake.py).
* `BufferExporter` (`shm`, `cuda_ipc`): the sequence's KV is gathered into a leased buffer
  that decode copies out of (two copies, but the exporter's pool can live anywhere, a GPU's).

Both are driven from the engine thread only (exports, and releases after acks or lease
expiry), so pins and the engine's block manager never race.
"""

from __future__ import annotations

import logging

from pipeline import schema
from pipeline.engine.base import StepEngine
from pipeline.engine.kv_cache import KVCache
from pipeline.engine.outputs import KVStorage
from pipeline.engine.sequence import Sequence
from pipeline.transfer import ExportPool, ExportPoolFullError, get_transport
from pipeline.transfer.base import dtype_name
from pipeline.transfer.mooncake import MooncakeServer
from pipeline.transfer.shm_pool import PinLeases, SharedKVPool

log = logging.getLogger(__name__)


def _descriptor(engine: StepEngine, seq: Sequence, **fields) -> schema.KVDescriptor:
    mc = engine.model_config  # type: ignore[attr-defined]
    return schema.KVDescriptor(
        num_tokens=seq.num_computed_tokens,
        num_layers=mc.num_hidden_layers,
        num_kv_heads=mc.num_key_value_heads,
        head_dim=mc.head_dim,
        dtype=dtype_name(engine.dtype),  # type: ignore[attr-defined]
        **fields,
    )


class BufferExporter:
    """Copies each handed-off sequence's KV into a leased buffer of `transport`."""

    kv_storage: KVStorage | None = None
    extra_kv_gb = 0.0

    def __init__(self, transport: str, owner: str, max_bytes: int, lease_ms: int) -> None:
        self.owner = owner
        self.pool = ExportPool(get_transport(transport), owner, max_bytes, lease_ms)

    def export(self, engine: StepEngine, seq: Sequence) -> schema.KVDescriptor | None:
        try:
            handle, buf = self.pool.export(engine.export_shape(seq.request_id), engine.dtype)  # type: ignore[attr-defined]
        except ExportPoolFullError:
            log.warning("export pool full: %s goes to decode without KV", seq.request_id)
            return None
        engine.export_kv(seq.request_id, out=buf)  # type: ignore[attr-defined]
        return _descriptor(
            engine,
            seq,
            transport=handle.transport,
            handle=handle.handle,
            nbytes=handle.nbytes,
            owner=self.owner,
            expires_ms=handle.expires_ms,
        )

    def bind(self, engine: StepEngine) -> None:
        """(Buffers are sized per export: nothing depends on the engine.)"""

    def release(self, engine: StepEngine, acked: list[str]) -> None:
        for handle in acked:
            self.pool.ack(handle)
        self.pool.reap()

    def nearly_full(self) -> bool:
        return self.pool.used_bytes > 0.9 * self.pool.max_bytes

    def close(self) -> None:
        self.pool.close()


class PinnedExporter:
    """Lends handed-off sequences' blocks of the engine's shared-memory pool in place, and
    over Mooncake too when `mooncake_host` is given (None: same host only)."""

    def __init__(
        self, owner: str, max_bytes: int, lease_ms: int, mooncake_host: str | None = None
    ) -> None:
        # The engine first: a missing wheel stops the worker now, before the model loads.
        self.server = MooncakeServer(mooncake_host) if mooncake_host is not None else None
        self.owner = owner
        self.max_bytes = max_bytes
        self.shared = SharedKVPool()
        self.kv_storage: KVStorage | None = self.shared.storage
        self.extra_kv_gb = max_bytes / 2**30  # the engine's pool grows by what pins may take
        self.leases = PinLeases(0, lease_ms)  # bounded once the engine exists (bind)
        self.bytes_per_block = 0
        self.pool_blocks = 0

    def bind(self, engine: StepEngine) -> None:
        mc = engine.model_config  # type: ignore[attr-defined]
        self.bytes_per_block = KVCache.bytes_per_block(
            mc.num_hidden_layers,
            engine.config.block_size,
            mc.num_key_value_heads,
            mc.head_dim,
            engine.dtype,  # type: ignore[attr-defined]
        )
        self.leases.max_blocks = self.max_bytes // self.bytes_per_block
        self.pool_blocks = engine.block_manager.num_blocks  # type: ignore[attr-defined]
        if self.server is not None and self.shared.segment is not None:
            self.server.serve(self.shared.address, self.shared.segment.size)

    def export(self, engine: StepEngine, seq: Sequence) -> schema.KVDescriptor | None:
        num_blocks = engine.block_manager.num_blocks_for(seq.num_computed_tokens)  # type: ignore[attr-defined]
        if not self.leases.can_pin(num_blocks):
            log.warning("export pool full: %s goes to decode without KV", seq.request_id)
            return None
        pinned = engine.pin_kv(seq.request_id)  # type: ignore[attr-defined]
        handle, expires = self.leases.add(self.shared.name, pinned.blocks)
        remote = {}
        if self.server is not None and self.server.address:
            remote = dict(
                session=self.server.session,
                pool_addr=self.server.address,
                pool_blocks=self.pool_blocks,
            )
        return _descriptor(
            engine,
            seq,
            transport="shm_pool",
            handle=handle,
            nbytes=len(pinned.blocks) * self.bytes_per_block,
            owner=self.owner,
            expires_ms=expires,
            block_size=engine.config.block_size,
            blocks=pinned.blocks,
            block_gens=pinned.generations,
            **remote,
        )

    def release(self, engine: StepEngine, acked: list[str]) -> None:
        blocks = [b for handle in acked for b in self.leases.ack(handle)] + self.leases.reap()
        if blocks:  # (none ever with an engine that cannot export, e.g. vLLM)
            engine.unpin_kv(blocks)  # type: ignore[attr-defined]

    def nearly_full(self) -> bool:
        return self.leases.num_blocks > 0.9 * self.leases.max_blocks

    def close(self) -> None:
        # Readers may still map the segment: unlinking only drops its name (their copies
        # finish); a stale handle then fails to attach, and decode prefills again. Remote
        # readers fail to reach the engine once it is gone (their reads fail at once).
        if self.server is not None:
            self.server.close()
        self.shared.close()


def make_exporter(
    transport: str, owner: str, max_bytes: int, lease_ms: int, mooncake_host: str = ""
) -> BufferExporter | PinnedExporter:
    """`mooncake_host`: the address remote readers reach this worker's engine at (empty: this
    host's); used by transport `mooncake` only."""
    if transport in ("shm_pool", "mooncake"):
        host = mooncake_host if transport == "mooncake" else None
        return PinnedExporter(owner, max_bytes, lease_ms, host)
    return BufferExporter(transport, owner, max_bytes, lease_ms)
