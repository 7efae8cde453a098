"""Llama-family decoder (Llama, Mistral, Qwen2, Qwen3) over a flat token batch and paged KV.

Projections are fused (q/k/v into one matmul, gate/up into another); the loader splits the
checkpoint's separate tensors into them. Logits are computed only for the rows that sample.

On CPU, once every projection runs on one of our C linear kernels (`prepack_linears`), the
engine calls `fuse_cpu_stack`: the layers' forward is then one C call (kernels/decoder_cpu.py)
running the same kernels as the modules, bit for bit, without the Python between them.
"""

from __future__ import annotations

import torch
from torch import nn

from pipeline.engine.attention import AttentionMetadata, paged_attention
from pipeline.engine.model_config import ModelConfig
from pipeline.engine.rope import RotaryEmbedding
from pipeline.kernels import decoder_cpu, dispatch, elementwise
from pipeline.kernels.cpu_linear import kernel_of


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalize in fp32, scale in the model dtype: the same rounding as HF's LlamaRMSNorm.
        return elementwise.rms_norm(x, self.weight, self.eps)

    def add_forward(
        self, x: torch.Tensor, residual: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(norm(x + residual), x + residual): a residual add fused with the next norm."""
        return elementwise.add_rms_norm(x, residual, self.weight, self.eps)


class Attention(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.num_heads = cfg.num_attention_heads
        self.num_kv_heads = cfg.num_key_value_heads
        self.head_dim = cfg.head_dim
        self.q_size = self.num_heads * self.head_dim
        self.kv_size = self.num_kv_heads * self.head_dim
        self.scale = self.head_dim**-0.5
        self.qkv_proj = nn.Linear(
            cfg.hidden_size, self.q_size + 2 * self.kv_size, cfg.attention_bias
        )
        self.o_proj = nn.Linear(
            self.q_size, cfg.hidden_size, bias=cfg.attention_bias and cfg.family != "qwen2"
        )
        self.q_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None
        self.k_norm = RMSNorm(self.head_dim, cfg.rms_norm_eps) if cfg.qk_norm else None

    def forward(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        kv: tuple[torch.Tensor, torch.Tensor],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        t = x.shape[0]  # x: [T, hidden]
        q, k, v = self.qkv_proj(x).split([self.q_size, self.kv_size, self.kv_size], dim=-1)
        q = q.view(t, self.num_heads, self.head_dim)
        k = k.view(t, self.num_kv_heads, self.head_dim)
        v = v.view(t, self.num_kv_heads, self.head_dim)
        if self.q_norm is not None:
            q, k = self.q_norm(q), self.k_norm(k)
        q, k = elementwise.rotary(q, k, *rope)
        o = paged_attention(q, k, v.contiguous(), kv[0], kv[1], meta, self.scale)
        return self.o_proj(o.reshape(t, self.q_size))


class MLP(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.intermediate_size = cfg.intermediate_size
        self.gate_up_proj = nn.Linear(cfg.hidden_size, 2 * cfg.intermediate_size, cfg.mlp_bias)
        self.down_proj = nn.Linear(cfg.intermediate_size, cfg.hidden_size, cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(elementwise.silu_and_mul(self.gate_up_proj(x)))


class DecoderLayer(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = Attention(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg)

    def forward(self, x, residual, rope, kv, meta):
        """x: this layer's input before its norm, as (the previous layer's MLP output, the
        residual stream before adding it); residual None for the first layer. Returns the
        same pair for the next layer: each residual add is fused with the norm after it."""
        if residual is None:
            residual, h = x, self.input_layernorm(x)
        else:
            h, residual = self.input_layernorm.add_forward(x, residual)
        h = self.self_attn(h, rope, kv, meta)
        h, residual = self.post_attention_layernorm.add_forward(h, residual)
        return self.mlp(h), residual


class CausalLM(nn.Module):
    """Decoder stack + LM head. forward() -> hidden states; compute_logits() -> fp32 logits."""

    def __init__(self, cfg: ModelConfig, max_position: int):
        super().__init__()
        self.config = cfg
        self.rotary = RotaryEmbedding(cfg.head_dim, max_position, cfg.rope_theta, cfg.rope_scaling)
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.embed_tokens.weight
        self.cpu_stack: decoder_cpu.DecoderStack | None = None  # fuse_cpu_stack sets it

    def fuse_cpu_stack(self) -> bool:
        """Run the layers in one C call from now on, where they allow it: every projection on
        the same C linear kernel of the model's dtype, no q/k norms, the kernels built. Call it
        after `prepack_linears`; returns whether the stack is fused."""
        self.cpu_stack = None
        cfg = self.config
        projections = [
            (layer.self_attn.qkv_proj, layer.self_attn.o_proj, layer.mlp.gate_up_proj,
             layer.mlp.down_proj)
            for layer in self.layers
        ]  # fmt: skip
        kernels = {kernel_of(p) for ps in projections for p in ps}
        dtype = self.embed_tokens.weight.dtype
        if (
            cfg.qk_norm
            or len(kernels) != 1
            or None in kernels
            or self.embed_tokens.weight.device.type != "cpu"
            or not decoder_cpu.is_supported(dtype)
        ):
            return False
        (linear,) = kernels
        if linear.dtype != dtype:
            return False
        layers = [
            decoder_cpu.LayerWeights(
                layer.input_layernorm.weight.detach(),
                layer.post_attention_layernorm.weight.detach(),
                *(t for p in ps for t in (p.packed_weight, p.bias)),
            )
            for layer, ps in zip(self.layers, projections, strict=True)
        ]
        attn = self.layers[0].self_attn
        shape = decoder_cpu.StackShape(
            cfg.hidden_size, attn.num_heads, attn.num_kv_heads, attn.head_dim,
            cfg.intermediate_size, cfg.rms_norm_eps, attn.scale,
        )  # fmt: skip
        self.cpu_stack = decoder_cpu.DecoderStack(layers, shape, linear)
        return True

    def _runs_fused(self, x: torch.Tensor, meta: AttentionMetadata) -> bool:
        """Whether this batch goes through `cpu_stack`: all its rows in one decode group (the
        C attention path's batch) and C kernels on."""
        if self.cpu_stack is None or meta.prefills or len(meta.decode_groups) != 1:
            return False
        g = meta.decode_groups[0]
        return g.start == 0 and g.end == x.shape[0] and dispatch.backend() == "auto"

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        # input_ids, positions: [T]  ->  hidden: [T, hidden]
        x = self.embed_tokens(input_ids)
        rope = self.rotary.cos_sin(positions, x.dtype)
        if self._runs_fused(x, meta):
            g = meta.decode_groups[0]
            x, residual = self.cpu_stack.forward(
                x, *rope, meta.slot_mapping, g.block_tables, g.context_lens, kv_caches
            )
            return x + residual
        return self.forward_modules(x, rope, kv_caches, meta)

    def forward_modules(
        self,
        x: torch.Tensor,
        rope: tuple[torch.Tensor, torch.Tensor],
        kv_caches: list[tuple[torch.Tensor, torch.Tensor]],
        meta: AttentionMetadata,
    ) -> torch.Tensor:
        """The layers module by module: embeddings x [T, hidden] -> hidden [T, hidden]."""
        residual = None
        for layer, kv in zip(self.layers, kv_caches, strict=True):
            x, residual = layer(x, residual, rope, kv, meta)
        return x + residual

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        # hidden: [S, hidden] (sampling rows only) -> logits: [S, vocab] fp32
        return self.lm_head(self.norm(hidden)).float()
