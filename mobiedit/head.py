"""A low-precision-stored, fp32-computed LM head and token embedding.

Qwen2.5-0.5B's tied embedding / LM head is 136 M of its 494 M parameters: 544 MB in fp32, more
than its whole int8 body. Stored in bfloat16 it takes half; :class:`ChunkedHead` still runs the
head in fp32 on slices of vocabulary rows upcast on the fly, and the embedding's output is upcast,
so every activation — and so the perturbation signal the ZO loop reads — stays fp32. Rounding the
weights once is a fixed change of the model (like int8 body weights), not noise on the losses.

Invariant: after :func:`narrow_head` the model's head and embedding weights are stored in the
given dtype, its outputs are fp32, and a tied head and embedding still share one tensor.
"""
from __future__ import annotations

import logging

import torch

from .errors import ConfigError
from .families import Family, get_module

log = logging.getLogger(__name__)

HEAD_DTYPES: dict[str, torch.dtype] = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def head_dtype_of(name: str, where: str) -> torch.dtype:
    """The torch dtype for a head-dtype name, with a clear error naming ``where``."""
    if name not in HEAD_DTYPES:
        raise ConfigError(f"unknown head dtype {name!r}", where=where, fix=f"use one of {sorted(HEAD_DTYPES)}")
    return HEAD_DTYPES[name]


class ChunkedHead(torch.nn.Module):
    """``logits = h @ Wᵀ (+ b)`` in fp32 for a weight stored in a narrower float dtype.

    The weight is upcast ``rows`` vocabulary rows at a time (default: as many as fit in
    ``MAX_SLICE_ELEMS`` fp32 values, 8 MB — 2340 rows at Qwen2.5-0.5B's width 896), so the
    transient is one slice, never a full fp32 copy.
    """

    MAX_SLICE_ELEMS = 1 << 21

    def __init__(self, weight: torch.nn.Parameter, bias: torch.Tensor | None = None, rows: int | None = None) -> None:
        super().__init__()
        self.weight = weight
        self.bias = bias
        self.rows = rows or max(1, self.MAX_SLICE_ELEMS // weight.shape[1])

    @property
    def out_features(self) -> int:
        return self.weight.shape[0]

    @property
    def in_features(self) -> int:
        return self.weight.shape[1]

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        h = h.float()
        V = self.weight.shape[0]
        out = h.new_empty(*h.shape[:-1], V)
        for i in range(0, V, self.rows):
            out[..., i:i + self.rows] = torch.nn.functional.linear(h, self.weight[i:i + self.rows].float())
        if self.bias is not None:
            out += self.bias.float()
        return out


def _upcast_output(_mod: torch.nn.Module, _args, out: torch.Tensor) -> torch.Tensor:
    return out.float()


def _set_module(model: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def narrow_head(model: torch.nn.Module, family: Family, dtype: torch.dtype) -> torch.nn.Module:
    """Store ``model``'s LM head and token embedding in ``dtype`` (in place; fp32 is a no-op).

    The head becomes a :class:`ChunkedHead`; the embedding gets a forward hook that upcasts its
    output. A tied pair stays tied (one tensor). Returns ``model``.
    """
    if dtype == torch.float32:
        return model
    head = get_module(model, family.lm_head)
    emb = get_module(model, family.embed)
    tied = head.weight is emb.weight
    with torch.no_grad():
        hw = torch.nn.Parameter(head.weight.detach().to(dtype), requires_grad=False)
        ew = hw if tied else torch.nn.Parameter(emb.weight.detach().to(dtype), requires_grad=False)
    emb.weight = ew
    if not any(h is _upcast_output for h in emb._forward_hooks.values()):
        emb.register_forward_hook(_upcast_output)
    bias = getattr(head, "bias", None)
    _set_module(model, family.lm_head, ChunkedHead(hw, None if bias is None else bias.detach()))
    log.info("LM head%s stored as %s, computed in fp32", " and tied embedding" if tied else " and embedding", dtype)
    return model


def head_param_names(family: Family) -> set[str]:
    """State-dict names of the head and embedding weights (the tensors :func:`narrow_head` narrows)."""
    return {f"{family.lm_head}.weight", f"{family.embed}.weight"}
