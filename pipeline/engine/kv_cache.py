"""The KV block pool tensors and the copies in and out of it (rollback COW, export, import)."""

from __future__ import annotations

import torch


class KVCache:
    """All layers' K and V: [layers, 2, kv_heads, num_blocks, block_size, head_dim].

    Head-major inside a layer (see attention.py for why). Exports are head-major too,
    [layers, 2, kv_heads, tokens, head_dim], so an export is one gather straight into the
    handoff buffer and an import one scatter out of it (DESIGN.md section 6 drew the
    token-major layout; that would cost a transpose copy on each side).
    """

    def __init__(
        self,
        num_layers: int,
        num_blocks: int,
        block_size: int,
        num_kv_heads: int,
        head_dim: int,
        dtype: torch.dtype,
        device: torch.device,
    ):
        self.block_size = block_size
        self.kv = torch.zeros(
            num_layers,
            2,
            num_kv_heads,
            num_blocks,
            block_size,
            head_dim,
            dtype=dtype,
            device=device,
        )
        self.layers = [(self.kv[i, 0], self.kv[i, 1]) for i in range(num_layers)]

    @staticmethod
    def bytes_per_block(
        num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        return num_layers * 2 * block_size * num_kv_heads * head_dim * dtype.itemsize

    def _slots(self, block_table: list[int], num_tokens: int) -> torch.Tensor:
        bs = self.block_size
        blocks = torch.tensor(block_table, dtype=torch.long, device=self.kv.device)
        offsets = torch.arange(bs, device=self.kv.device)
        return (blocks[:, None] * bs + offsets[None, :]).flatten()[:num_tokens]

    def _flat(self) -> torch.Tensor:
        l, _, h, n, bs, d = self.kv.shape
        return self.kv.view(l, 2, h, n * bs, d)

    def copy_blocks(self, pairs: list[tuple[int, int]]) -> None:
        if not pairs:
            return
        src = torch.tensor([p[0] for p in pairs], device=self.kv.device)
        dst = torch.tensor([p[1] for p in pairs], device=self.kv.device)
        self.kv[:, :, :, dst] = self.kv[:, :, :, src]

    def export_shape(self, num_tokens: int) -> tuple[int, ...]:
        """Buffer shape for an export of `num_tokens`: whole blocks, [L, 2, KVH, tokens, D]."""
        l, _, h, _, bs, d = self.kv.shape
        return (l, 2, h, -(-num_tokens // bs) * bs, d)

    def export(
        self, block_table: list[int], num_tokens: int, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """A sequence's first `num_tokens` tokens: [layers, 2, kv_heads, tokens, head_dim].

        Whole blocks are gathered (block-sized rows copy far faster than token-sized ones)
        into `out` (shape `export_shape(num_tokens)`, e.g. shared memory) or a new tensor; the
        result is a view of its first `num_tokens` tokens.
        """
        l, _, h, n, bs, d = self.kv.shape
        shape = self.export_shape(num_tokens)
        nb = shape[3] // bs
        if out is None:
            out = torch.empty(shape, dtype=self.kv.dtype, device=self.kv.device)
        blocks = torch.tensor(block_table[:nb], dtype=torch.long, device=self.kv.device)
        src = self.kv.view(l, 2, h, n, bs * d)
        torch.index_select(src, 3, blocks, out=out.view(l, 2, h, nb, bs * d))
        return out[:, :, :, :num_tokens]

    def import_(self, block_table: list[int], kv: torch.Tensor) -> None:
        """Write [layers, 2, kv_heads, tokens, head_dim] into the slots of `block_table`."""
        l, _, h, n, bs, d = self.kv.shape
        kv = kv.to(device=self.kv.device, dtype=self.kv.dtype)
        num_tokens = kv.shape[3]
        full = num_tokens // bs
        if full:  # whole blocks in one block-row scatter
            blocks = torch.tensor(block_table[:full], dtype=torch.long, device=self.kv.device)
            src = kv[:, :, :, : full * bs].reshape(l, 2, h, full, bs * d)
            self.kv.view(l, 2, h, n, bs * d).index_copy_(3, blocks, src)
        if num_tokens > full * bs:  # the partial last block, token by token
            slots = self._slots(block_table, num_tokens)[full * bs :]
            self._flat().index_copy_(3, slots, kv[:, :, :, full * bs :])
