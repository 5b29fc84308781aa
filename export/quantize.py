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
    """Module paths that stay float: the edit layer's ``mlp_out``, the programs' rank-one slot
    module and (by default) the LM head."""
    from .adapters import SLOTS

    keep = {family.mlp_out.format(layer), SLOTS}
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


def nbits_source(model: torch.nn.Module, family: Family, layer: int, cfg: QuantizeConfig) -> torch.nn.Module:
    """The model ``nbits`` programs are captured from (their MatMuls are block-quantized on the
    lowered ONNX graph, :mod:`~mobiedit.export.onnx_nbits`): ``model`` itself, or with
    ``cfg.quantize_embedding`` a copy sharing every parameter whose token embedding is int8 rows
    (:class:`GatherQuantEmbedding`; ONNX Runtime's block-quantized Gather takes 4 bits only). A
    tied embedding stays float while the LM head is a float island, as in :func:`quantize_model`."""
    import copy

    emb, head = get_module(model, family.embed), get_module(model, family.lm_head)
    if not cfg.quantize_embedding or (head.weight is emb.weight and family.lm_head in float_islands(family, layer, cfg)):
        return model
    out = copy.deepcopy(model, memo={id(p): p for p in model.parameters()})  # new modules, the same tensors
    _replace(out, family.embed, GatherQuantEmbedding(emb.weight))
    return out


class WeightOnlyLinear(torch.nn.Module):
    """``nn.Linear`` with int8 per-output-channel weights and FLOAT activations (w8a32).

    ``forward(x) = x @ (W_q · s)ᵀ + b`` with the weight dequantized in the graph (cast + mul) and
    the product as a batched matmul of two activations, which XNNPACK delegates. The activation
    path is never rounded, so a small perturbation of ``x`` is seen exactly (the edit program's
    requirement); only the weights carry a fixed quantization error.
    """

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach().float().t().contiguous()                   # [in, out]
        scale = w.abs().amax(dim=0, keepdim=True).clamp(min=1e-12) / 127.0    # [1, out]
        self.register_buffer("weight_q", torch.round(w / scale).clamp(-127, 127).to(torch.int8))
        self.register_buffer("scale", scale)
        self.bias = None if linear.bias is None else torch.nn.Parameter(linear.bias.detach().float(),
                                                                        requires_grad=False)
        self.in_features, self.out_features = w.shape

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.weight_q.to(torch.float32) * self.scale
        y = torch.bmm(x.reshape(1, -1, self.in_features), w.unsqueeze(0))
        y = y.reshape(*x.shape[:-1], self.out_features)
        return y if self.bias is None else y + self.bias


def weight_only_model(model: torch.nn.Module, family: Family, layer: int) -> int:
    """Replace, in place, every ``nn.Linear`` of ``model`` except the edit layer's ``mlp_out`` by a
    :class:`WeightOnlyLinear` (the LM head included: its compute stays float). Returns the count."""
    keep = {family.mlp_out.format(layer)}
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n not in keep]
    for name in names:
        _replace(model, name, WeightOnlyLinear(model.get_submodule(name)))
    log.info("weight-only int8: %d linears (float: %s)", len(names), sorted(keep))
    return len(names)


def fake_quant_per_token(x: torch.Tensor) -> torch.Tensor:
    """``x`` rounded like a per-token asymmetric int8 dynamic quantizer (torchao's 8da activation
    quantization: range includes 0, 255 steps), returned in float."""
    lo = x.amin(dim=-1, keepdim=True).clamp(max=0.0)
    hi = x.amax(dim=-1, keepdim=True).clamp(min=0.0)
    scale = ((hi - lo) / 255.0).clamp(min=torch.finfo(torch.float32).eps)
    zp = -128.0 - torch.round(lo / scale)
    q = (torch.round(x / scale) + zp).clamp(-128.0, 127.0)
    return (q - zp) * scale


class DeltaLinear(torch.nn.Module):
    """A dynamically quantized linear that quantizes each row group's *change* from the base group.

    Rows are ``G`` groups of ``base_rows`` (the edit program's ``k·B + b`` layout, group 0 = δ = 0).
    ``y = inner(x₀)⊕… + inner(Δ) + inner(Δ − fq(Δ)) − 2b`` with ``Δ = x − x₀``: the base rows'
    quantization error is the same for every group (it cancels in loss differences), and the
    delta's effect is quantized relative to its own magnitude, twice (the second GEMM takes the
    first one's rounding error; ``levels=1`` skips it). Same weights as ``inner`` (shared in one
    ``.pte``); costs ``levels`` extra GEMMs of the delta rows plus one of the base rows.
    """

    def __init__(self, inner: torch.nn.Module, base_rows: int, levels: int = 2) -> None:
        super().__init__()
        self.inner, self.base_rows, self.levels = inner, base_rows, levels
        self.in_features, self.out_features = inner.in_features, inner.out_features

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        groups = x.shape[0] // self.base_rows
        base = x[: self.base_rows]

        def rep(t: torch.Tensor) -> torch.Tensor:
            return torch.cat([t] * groups, dim=0)

        dx = x - rep(base)
        y = rep(self.inner(base)) + self.inner(dx)
        if self.levels > 1:
            y = y + self.inner(dx - fake_quant_per_token(dx))
        bias = getattr(self.inner, "bias", None)
        return y if bias is None else y - self.levels * bias


def delta_model(quantized: torch.nn.Module, family: Family, layer: int, rows: int, cfg: QuantizeConfig,
                levels: int = 2) -> torch.nn.Module:
    """A copy of a torchao-quantized ``quantized`` model whose quantized linears after ``layer``
    (and the LM head when quantized) are :class:`DeltaLinear` — the edit program's model."""
    import copy

    from mobiedit.families import n_layers

    model = copy.deepcopy(quantized)
    keep = float_islands(family, layer, cfg)
    prefixes = tuple(family.layer.format(i) + "." for i in range(layer + 1, n_layers(model, family)))
    names = [n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear) and n not in keep
             and (n.startswith(prefixes) or n == family.lm_head)]
    for name in names:
        _replace(model, name, DeltaLinear(model.get_submodule(name), 1 if name == family.lm_head else rows, levels))
    log.info("delta-decomposed dynamic quantization: %d linears", len(names))
    return model
