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

    def export(
        self, block_table: list[int], num_tokens: int, out: torch.Tensor | None = None
    ) -> torch.Tensor:
        """A sequence's first `num_tokens` tokens: [layers, 2, kv_heads, tokens, head_dim].

        With `out` (e.g. a shared-memory buffer of that shape), the gather writes into it.
        """
        slots = self._slots(block_table, num_tokens)
        if out is None:
            return self._flat().index_select(3, slots)
        return torch.index_select(self._flat(), 3, slots, out=out)

    def import_(self, block_table: list[int], kv: torch.Tensor) -> None:
        """Write [layers, 2, kv_heads, tokens, head_dim] into the slots of `block_table`."""
        slots = self._slots(block_table, kv.shape[3])
        self._flat().index_copy_(3, slots, kv.to(device=self.kv.device, dtype=self.kv.dtype))
