"""A toy module tree with llama's ``mlp_out`` names, for journal fuzzing and kill tests."""
from __future__ import annotations

from typing import Any

JOURNAL_MODULES = ("model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj")
D_OUT, D_IN = 4, 6


def toy_llama() -> Any:
    """``model.layers.{0,1}.mlp.down_proj`` Linear(D_IN -> D_OUT) weights drawn from a seeded
    generator: the same weights on every call."""
    import torch

    root = torch.nn.Module()
    root.model = torch.nn.Module()
    layers = []
    gen = torch.Generator().manual_seed(0)
    for _ in JOURNAL_MODULES:
        block = torch.nn.Module()
        block.mlp = torch.nn.Module()
        block.mlp.down_proj = torch.nn.Linear(D_IN, D_OUT, bias=False)
        with torch.no_grad():
            block.mlp.down_proj.weight.copy_(torch.randn(D_OUT, D_IN, generator=gen))
        layers.append(block)
    root.model.layers = torch.nn.ModuleList(layers)
    return root
