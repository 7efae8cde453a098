"""LoRA for training the R1-style reasoner (tools/train_r1_reasoner.py): low-rank adapters on a
frozen base. `add_lora(model, rank, alpha, targets)` wraps the named linear layers of an HF model
so that `y = W x + (alpha / rank) * B (A x)`, with only A and B trainable (B starts at zero, so
the wrapped model starts as the base). Merging an adapter into a checkpoint is the runtime's
(pipeline/models/prepare.py: `merge_lora`)."""

from __future__ import annotations

import math

import torch
from torch import nn

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


class LoRALinear(nn.Module):
    """A frozen linear layer plus a trainable low-rank update."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        for p in self.base.parameters():
            p.requires_grad_(False)
        self.scale = alpha / rank
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # x: [..., in_features] -> [..., out_features]
        return self.base(x) + (x @ self.lora_a.t() @ self.lora_b.t()) * self.scale


def add_lora(model: nn.Module, rank: int, alpha: float, targets=TARGETS) -> list[str]:
    """Wrap every linear layer whose name ends in one of `targets`; returns their names."""
    for p in model.parameters():
        p.requires_grad_(False)
    names = []
    for name, module in list(model.named_modules()):
        for child_name, child in list(module.named_children()):
            if child_name in targets and isinstance(child, nn.Linear):
                setattr(module, child_name, LoRALinear(child, rank, alpha))
                names.append(f"{name}.{child_name}" if name else child_name)
    return names


def adapter_state(model: nn.Module) -> dict[str, torch.Tensor]:
    """The trainable tensors only: `<layer>.lora_a` / `<layer>.lora_b`."""
    return {k: v.detach().clone() for k, v in model.state_dict().items() if ".lora_" in k}
