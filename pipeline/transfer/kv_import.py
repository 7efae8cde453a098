"""How a decode worker takes a sequence's KV from a handoff: copy the lent blocks straight out
of the prefill worker's shared pool (`shm_pool`), read them over Mooncake when that pool is on
another host (`mooncake`), or copy out of a leased buffer (`shm`, `cuda_ipc`), into its own
engine's pool. The counterpart of kv_export.py.

A failure raises TransferExpiredError (the buffer or the blocks are gone, were reused while
they were read, or a remote read passed its deadline) or a StepwiseError; decode then prefills
the prompt again. `KVImporter.last` says what the last import did, for metrics and traces.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

from pipeline import schema
from pipeline.config import PipelineConfig
from pipeline.engine import KVBlocks, KVExport
from pipeline.engine.base import StepEngine
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence
from pipeline.errors import StepwiseError
from pipeline.transfer import KVHandle, TransferExpiredError, get_transport
from pipeline.transfer.base import dtype_itemsize, torch_dtype
from pipeline.transfer.mooncake import MooncakeReader, PendingRead, TransferTimeoutError
from pipeline.transfer.shm_pool import PoolReader, segment_of


@dataclass(slots=True)
class ImportRecord:
    """What one `import_kv` did."""

    transport: str  # how the bytes came: shm_pool | mooncake | shm | cuda_ipc
    nbytes: int  # the handoff's KV bytes
    ms: float = 0.0  # wall time of the import, failed or not
    error: str | None = None  # the error's code when it failed (then decode prefills again)
    reason: str = ""  # and its message

    @property
    def ok(self) -> bool:
        return self.error is None


class KVImporter:
    """Reads whichever transport a handoff names (a prefill worker may be set up differently
    from this one): `kv_transport`'s copying transport for buffers, shared pools in place, or
    over Mooncake when the pool is not on this host. `kv_transport="mooncake"` reads every
    pool that Mooncake serves over Mooncake, even one on this host (and needs the wheel now).

    `mooncake_host` / `read_timeout_ms`: None takes the process's settings."""

    def __init__(
        self,
        kv_transport: str,
        *,
        mooncake_host: str | None = None,
        read_timeout_ms: int | None = None,
    ) -> None:
        copying = "shm" if kv_transport in ("shm_pool", "mooncake") else kv_transport
        self.transport = get_transport(copying)
        self.pool_reader = PoolReader()
        defaults = PipelineConfig()  # from_config passes the worker's own values
        if mooncake_host is None:
            mooncake_host = defaults.mooncake_host
        if read_timeout_ms is None:
            read_timeout_ms = defaults.kv_read_timeout_ms
        self.mooncake_host, self.read_timeout_ms = mooncake_host, read_timeout_ms
        self.remote_first = kv_transport == "mooncake"
        self._mooncake: MooncakeReader | None = None
        if self.remote_first:
            self._mooncake = MooncakeReader(self.mooncake_host, self.read_timeout_ms)
        self.last: ImportRecord | None = None
        # A remote read begun ahead of the import (`begin`): (job id, the read, its start).
        self._ahead: tuple[str, PendingRead, float] | None = None

    @classmethod
    def from_config(cls, config: PipelineConfig) -> KVImporter:
        return cls(
            config.kv_transport,
            mooncake_host=config.mooncake_host,
            read_timeout_ms=config.kv_read_timeout_ms,
        )

    def route(self, d: schema.KVDescriptor) -> str:
        """The transport this handoff's KV comes by: a pool served over Mooncake too is read
        in place when it is on this host, unless this importer reads remotely first."""
        if d.transport != "shm_pool" or d.session is None:
            return d.transport
        if self.remote_first or d.pool_blocks is None:
            return "mooncake"
        return (
            "shm_pool"
            if self.pool_reader.holds(segment_of(d.handle), d.pool_blocks)
            else "mooncake"
        )

    # -- remote reads ahead of the import ------------------------------------------------------

    def is_remote(self, h: schema.Handoff) -> bool:
        """Does this handoff's KV come over the network (a read worth doing off the engine's
        loop)?"""
        return h.kv is not None and self.route(h.kv) == "mooncake"

    @property
    def reading(self) -> str | None:
        """The job whose remote read is on (begun, not yet imported)."""
        return self._ahead[0] if self._ahead is not None else None

    def begin(self, h: schema.Handoff) -> bool:
        """Start `h`'s remote read in the background (the engine steps on meanwhile); False
        when another is still on, or an abandoned one still holds the reader. A read that
        cannot even start is left to `import_kv`, which fails it as usual."""
        if self._ahead is not None or not self.is_remote(h):
            return False
        d = h.kv
        assert d is not None
        try:
            pending = self._remote_begin(d)
        except TransferTimeoutError:
            return False  # the reader is held by an abandoned read: the import fails fast
        except StepwiseError:
            return False  # (a bad descriptor, Mooncake missing): import_kv says so
        self._ahead = (h.id, pending, time.perf_counter())
        return True

    def forget(self, job_id: str) -> None:
        """`job_id` will not be imported (it failed to start): a read begun for it no longer
        holds the next one back (if still on, the reader says so and the next import fails
        fast, as after a read abandoned at its deadline)."""
        if self._ahead is not None and self._ahead[0] == job_id:
            self._ahead = None

    def ready(self, job_id: str) -> bool:
        """Is the read begun for `job_id` done (or past its deadline)?"""
        return self._ahead is not None and self._ahead[0] == job_id and self._ahead[1].ready

    def import_kv(self, engine: StepEngine, h: schema.Handoff, params: SamplingParams) -> Sequence:
        """The handoff's sequence, live in `engine` with its KV in place (a read begun ahead
        for it is finished first: waited for, at most to its deadline)."""
        d = h.kv
        assert d is not None
        t0 = time.perf_counter()
        ahead = None
        if self._ahead is not None and self._ahead[0] == h.id:
            ahead, t0 = self._ahead[1], self._ahead[2]
            self._ahead = None
        record = self.last = ImportRecord(d.transport, d.nbytes)
        try:
            record.transport = self.route(d)
            if record.transport == "mooncake":
                return self._import_remote(engine, h, d, params, ahead)
            if record.transport == "shm_pool":
                return self._import_blocks(engine, h, d, params)
            return self._import_buffer(engine, h, d, params)
        except Exception as e:
            record.error = e.code if isinstance(e, StepwiseError) else "internal"
            record.reason = str(e)
            raise
        finally:
            record.ms = (time.perf_counter() - t0) * 1000

    def _import_buffer(
        self, engine: StepEngine, h: schema.Handoff, d: schema.KVDescriptor, params: SamplingParams
    ) -> Sequence:
        # The buffer holds whole blocks of the exporter's size: its token count follows from
        # its bytes; the first d.num_tokens of them are the sequence's.
        per_token = d.num_layers * 2 * d.num_kv_heads * d.head_dim * dtype_itemsize(d.dtype)
        shape = (d.num_layers, 2, d.num_kv_heads, d.nbytes // per_token, d.head_dim)
        handle = KVHandle(d.transport, d.handle, shape, d.dtype, d.nbytes, d.owner, d.expires_ms)
        with self.transport.attach(handle) as buf:
            return engine.import_kv(_export(h, buf[:, :, :, : d.num_tokens]), params)  # type: ignore[attr-defined]

    def _import_blocks(
        self, engine: StepEngine, h: schema.Handoff, d: schema.KVDescriptor, params: SamplingParams
    ) -> Sequence:
        """Copy the prefill worker's pinned blocks straight out of its shared pool."""
        blocks, gens, block_shape = _lent(d)
        seq = None
        try:
            with self.pool_reader.read(
                segment_of(d.handle), torch_dtype(d.dtype), block_shape, blocks, gens
            ) as pool:
                seq = engine.import_kv(_export(h, KVBlocks(pool, blocks, d.num_tokens)), params)  # type: ignore[attr-defined]
        except TransferExpiredError:
            if seq is not None:  # copied, but the blocks were reused meanwhile: torn
                engine.abort(seq.request_id)
            raise
        return seq

    def _remote_begin(self, d: schema.KVDescriptor) -> PendingRead:
        """The pinned blocks' read over Mooncake into the staging pool, started."""
        blocks, gens, block_shape = _lent(d)
        if d.session is None or d.pool_addr is None or d.pool_blocks is None:
            raise TransferExpiredError("a mooncake handoff without its session")
        if self._mooncake is None:  # a pool on another host, read for the first time
            self._mooncake = MooncakeReader(self.mooncake_host, self.read_timeout_ms)
        return self._mooncake.begin(
            d.session, d.pool_addr, d.pool_blocks, torch_dtype(d.dtype), block_shape, blocks, gens
        )

    def _import_remote(
        self,
        engine: StepEngine,
        h: schema.Handoff,
        d: schema.KVDescriptor,
        params: SamplingParams,
        ahead: PendingRead | None = None,
    ) -> Sequence:
        """Read the pinned blocks over Mooncake into the staging pool (or take the read begun
        ahead), then import from it (the generations were checked after the read: what is
        staged is the handoff's)."""
        pending = ahead if ahead is not None else self._remote_begin(d)
        assert self._mooncake is not None
        pool = self._mooncake.finish(pending)
        staged = KVBlocks(pool, list(range(len(d.blocks or ()))), d.num_tokens)
        return engine.import_kv(_export(h, staged), params)  # type: ignore[attr-defined]

    def close(self) -> None:
        self.pool_reader.close()
        if self._mooncake is not None:
            self._mooncake.close()


def _lent(d: schema.KVDescriptor) -> tuple[list[int], list[int], tuple[int, int, int, int, int]]:
    """A pool handoff's blocks, their generations, and one block's shape."""
    if d.blocks is None or d.block_gens is None or d.block_size is None:
        raise TransferExpiredError("a pool handoff without its blocks")
    block_shape = (d.num_layers, 2, d.num_kv_heads, d.block_size, d.head_dim)
    return list(d.blocks), list(d.block_gens), block_shape


def _export(h: schema.Handoff, kv: KVBlocks | torch.Tensor) -> KVExport:
    return KVExport(h.id, [*h.token_ids, h.first_token], len(h.token_ids), kv, h.seed)
