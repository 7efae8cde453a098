"""Configuration objects, one per concern. This module is the one source of defaults."""

from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("auto", "float32", "bfloat16", "float16")


@dataclass(slots=True)
class EngineConfig:
    """How the native engine loads a model and batches work."""

    model: str
    dtype: str = "auto"  # auto: bfloat16 on CUDA, float32 on CPU
    device: str = "auto"  # auto: cuda when available, else cpu
    block_size: int = 16
    # KV pool size: explicit block count, or derived from a memory budget.
    num_kv_blocks: int | None = None
    kv_cache_memory_gb: float = 1.0
    max_num_seqs: int = 64
    max_num_batched_tokens: int = 2048
    max_model_len: int | None = None  # default: the model's max_position_embeddings
    enable_prefix_caching: bool = True
    step_delimiter: str = "\n"
    seed: int = 0  # seeds requests that bring no seed of their own
    num_threads: int | None = None  # torch intra-op threads; None leaves torch's choice
    # CPU: run projections through oneDNN with prepacked weights (pipeline/kernels/cpu_linear).
    cpu_prepack: bool = True

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.block_size < 1 or self.block_size & (self.block_size - 1):
            raise ValueError(f"block_size must be a power of two, got {self.block_size}")
        if self.num_kv_blocks is not None and self.num_kv_blocks < 2:
            raise ValueError("num_kv_blocks must be at least 2")
        if self.kv_cache_memory_gb <= 0:
            raise ValueError("kv_cache_memory_gb must be positive")
        if self.max_num_seqs < 1 or self.max_num_batched_tokens < 1:
            raise ValueError("max_num_seqs and max_num_batched_tokens must be positive")
        if self.max_model_len is not None and self.max_model_len < 2:
            raise ValueError("max_model_len must be at least 2")
        if not self.step_delimiter:
            raise ValueError("step_delimiter must not be empty")
