"""The KV block pool tensors and the copies in and out of it (rollback COW, export, import)."""

from __future__ import annotations

import torch

from pipeline.kernels.kv_transfer import copy_blocks_between, export_blocks, import_blocks


class KVCache:
    """All layers' K and V: [layers, 2, kv_heads, num_blocks, block_size, head_dim].

    Head-major inside a layer (see attention.py for why). Exports are head-major too,
    [layers, 2, kv_heads, tokens, head_dim], so an export is one gather straight into the
    handoff buffer and an import one scatter out of it (an early design drew the token-major
    layout; that would cost a transpose copy on each side).
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
        storage: torch.Tensor | None = None,
    ):
        """`storage`: memory to hold the pool (e.g. shared memory other processes read
        handed-off blocks from in place), at least as many elements of `dtype`; zeroed."""
        self.block_size = block_size
        shape = (num_layers, 2, num_kv_heads, num_blocks, block_size, head_dim)
        if storage is None:
            self.kv = torch.zeros(shape, dtype=dtype, device=device)
        else:
            numel = num_layers * 2 * num_kv_heads * num_blocks * block_size * head_dim
            if storage.dtype != dtype or storage.numel() < numel:
                raise ValueError(f"KV storage must hold {numel} {dtype} elements")
            if storage.device.type != torch.device(device).type:
                raise ValueError(
                    f"KV storage on {storage.device} for an engine on {device} (shared-memory "
                    "pools are for CPU engines; on a GPU use the cuda_ipc transport)"
                )
            self.kv = storage.reshape(-1)[:numel].view(shape)
        self.layers = [(self.kv[i, 0], self.kv[i, 1]) for i in range(num_layers)]

    @staticmethod
    def bytes_per_block(
        num_layers: int, block_size: int, num_kv_heads: int, head_dim: int, dtype: torch.dtype
    ) -> int:
        return num_layers * 2 * block_size * num_kv_heads * head_dim * dtype.itemsize

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
        shape = self.export_shape(num_tokens)
        nb = shape[3] // self.block_size
        if out is None:
            out = torch.empty(shape, dtype=self.kv.dtype, device=self.kv.device)
        blocks = torch.tensor(block_table[:nb], dtype=torch.long, device=self.kv.device)
        export_blocks(self.kv, blocks, out)
        return out[:, :, :, :num_tokens]

    def import_blocks(self, block_table: list[int], src: torch.Tensor, blocks: list[int]) -> None:
        """Copy blocks `blocks` of another pool `src` (same layout) into `block_table`."""
        copy_blocks_between(self.kv, block_table[: len(blocks)], src, blocks)

    def import_(self, block_table: list[int], kv: torch.Tensor) -> None:
        """Write [layers, 2, kv_heads, tokens, head_dim] into the slots of `block_table`."""
        kv = kv.to(device=self.kv.device, dtype=self.kv.dtype)
        nb = -(-kv.shape[3] // self.block_size)
        blocks = torch.tensor(block_table[:nb], dtype=torch.long, device=self.kv.device)
        import_blocks(self.kv, blocks, kv)
