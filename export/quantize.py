"""Quantize a model in place before export (ExecuTorch schemes) — float islands excepted.

* ``8da8w``: torchao ``Int8DynamicActivationIntxWeightConfig`` — int8 per-token dynamic
  activations, int8 per-output-channel symmetric weights (XNNPACK ``qd8-qc8w`` GEMMs).
* ``8da4w``: the same with int4 weights in groups of ``group_size`` (``qd8-qb4w``).
* ``quantize_embedding``: the token embedding becomes :class:`GatherQuantEmbedding` (int8 rows +
  one float scale per row, dequantized after the gather; portable ops only).

Float islands (never quantized): the edit layer's ``mlp_out`` (its rank-one slot path lives on its
output) and, unless ``quantize_lm_head``, the LM head. The delta input of the edit program is an
activation add and is never quantized by these schemes. ONNX QDQ happens after export
(:mod:`mobiedit.export.onnx_qdq`).
"""
from __future__ import annotations

import logging

import torch

from mobiedit.families import Family, get_module

from .config import QuantizeConfig

log = logging.getLogger(__name__)


def float_islands(family: Family, layer: int, cfg: QuantizeConfig) -> set[str]:
    """Module names that stay float: the edit layer's ``mlp_out`` and (by default) the LM head."""
    keep = {family.mlp_out.format(layer)}
    if not cfg.quantize_lm_head:
        keep.add(family.lm_head)
    return keep


class GatherQuantEmbedding(torch.nn.Module):
    """An embedding stored as int8 rows with a per-row float scale; gathers, then dequantizes.

    ``forward(ids) == weight_q[ids] * scale[ids]`` — only index_select / cast / mul, which every
    runtime has, and no full-table dequantization per call.
    """

    def __init__(self, weight: torch.Tensor) -> None:
        super().__init__()
        w = weight.detach().float()
        scale = w.abs().amax(dim=1, keepdim=True).clamp(min=1e-12) / 127.0
        self.register_buffer("weight_q", torch.round(w / scale).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.num_embeddings, self.embedding_dim = w.shape

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        flat = ids.reshape(-1)
        rows = self.weight_q.index_select(0, flat).to(torch.float32) * self.scale.index_select(0, flat)
        return rows.reshape(*ids.shape, self.embedding_dim)


def _replace(model: torch.nn.Module, name: str, new: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent) if parent else model, child, new)


def quantize_model(model: torch.nn.Module, family: Family, layer: int, cfg: QuantizeConfig) -> dict[str, int]:
    """Quantize ``model`` in place per ``cfg`` (no-op for fp32 and for ONNX QDQ).

    Returns counts {"linear": n quantized linears, "embedding": 0/1, "islands": n kept float}.
    Tied LM head / embedding weights are left float when the LM head is an island.
    """
    counts = {"linear": 0, "embedding": 0, "islands": 0}
    if cfg.scheme not in ("8da8w", "8da4w"):
        return counts
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    keep = float_islands(family, layer, cfg)
    counts["islands"] = len(keep)
    if cfg.scheme == "8da8w":
        tcfg = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int8, weight_granularity=PerAxis(0))
    else:
        tcfg = Int8DynamicActivationIntxWeightConfig(weight_dtype=torch.int4, weight_granularity=PerGroup(cfg.group_size))
    head = get_module(model, family.lm_head)
    emb = get_module(model, family.embed)
    tied = head.weight is emb.weight

    def pick(mod: torch.nn.Module, fqn: str) -> bool:
        ok = isinstance(mod, torch.nn.Linear) and fqn not in keep
        if ok and cfg.scheme == "8da4w" and mod.in_features % cfg.group_size:
            log.warning("%s: in_features %d not a multiple of group %d; left float", fqn, mod.in_features,
                        cfg.group_size)
            ok = False
        counts["linear"] += ok
        return ok

    quantize_(model, tcfg, filter_fn=pick)
    if cfg.quantize_embedding and not (tied and family.lm_head in keep):
        _replace(model, family.embed, GatherQuantEmbedding(emb.weight))
        counts["embedding"] = 1
    log.info("quantized %d linears (%s), embedding %d; float islands %s", counts["linear"], cfg.scheme,
             counts["embedding"], sorted(keep))
    return counts
