"""How a decode worker takes a sequence's KV from a handoff: copy the lent blocks straight out
of the prefill worker's shared pool (`shm_pool`), or out of a leased buffer (`shm`,
`cuda_ipc`), into its own engine's pool. The counterpart of kv_export.py.

A failure raises TransferExpiredError (the buffer or the blocks are gone, or were reused while
they were read) or a StepwiseError; decode then prefills the prompt again.
"""

from __future__ import annotations

from pipeline import schema
from pipeline.engine import KVBlocks, KVExport
from pipeline.engine.backend import StepEngine
from pipeline.engine.sampling_params import SamplingParams
from pipeline.engine.sequence import Sequence
from pipeline.transfer import KVHandle, TransferExpiredError, get_transport
from pipeline.transfer.base import dtype_itemsize, torch_dtype
from pipeline.transfer.shm_pool import PoolReader, segment_of


class KVImporter:
    """Reads whichever transport a handoff names (a prefill worker may be set up differently
    from this one): `kv_transport`'s copying transport for buffers, shared pools in place."""

    def __init__(self, kv_transport: str) -> None:
        self.transport = get_transport("shm" if kv_transport == "shm_pool" else kv_transport)
        self.pool_reader = PoolReader()

    def import_kv(self, engine: StepEngine, h: schema.Handoff, params: SamplingParams) -> Sequence:
        """The handoff's sequence, live in `engine` with its KV in place."""
        d = h.kv
        assert d is not None
        if d.transport == "shm_pool":
            return self._import_blocks(engine, h, d, params)
        # The buffer holds whole blocks of the exporter's size: its token count follows from
        # its bytes; the first d.num_tokens of them are the sequence's.
        per_token = d.num_layers * 2 * d.num_kv_heads * d.head_dim * dtype_itemsize(d.dtype)
        shape = (d.num_layers, 2, d.num_kv_heads, d.nbytes // per_token, d.head_dim)
        handle = KVHandle(d.transport, d.handle, shape, d.dtype, d.nbytes, d.owner, d.expires_ms)
        with self.transport.attach(handle) as buf:
            export = KVExport(
                h.id, [*h.token_ids, h.first_token], len(h.token_ids),
                buf[:, :, :, : d.num_tokens], h.seed,
            )  # fmt: skip
            return engine.import_kv(export, params)  # type: ignore[attr-defined]

    def _import_blocks(
        self, engine: StepEngine, h: schema.Handoff, d: schema.KVDescriptor, params: SamplingParams
    ) -> Sequence:
        """Copy the prefill worker's pinned blocks straight out of its shared pool."""
        if d.blocks is None or d.block_gens is None or d.block_size is None:
            raise TransferExpiredError("an shm_pool handoff without its blocks")
        name = segment_of(d.handle)
        block_shape = (d.num_layers, 2, d.num_kv_heads, d.block_size, d.head_dim)
        seq = None
        try:
            with self.pool_reader.read(
                name, torch_dtype(d.dtype), block_shape, d.blocks, d.block_gens
            ) as pool:
                export = KVExport(
                    h.id, [*h.token_ids, h.first_token], len(h.token_ids),
                    KVBlocks(pool, list(d.blocks), d.num_tokens), h.seed,
                )  # fmt: skip
                seq = engine.import_kv(export, params)  # type: ignore[attr-defined]
        except TransferExpiredError:
            if seq is not None:  # copied, but the blocks were reused meanwhile: torn
                engine.abort(seq.request_id)
            raise
        return seq
