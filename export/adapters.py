"""Glue between a Hugging Face causal LM and the static-shape export graphs.

Everything model-specific is looked up through the family templates (:mod:`mobiedit.families`)
plus the one table below; no code branches on a model's name. The export graphs call the HF
decoder blocks themselves (so every family-specific detail — biases, GQA, q/k norms — is the HF
code's), but they build masks and positions themselves and hand the blocks:

* an *additive* float mask (0 = visible, :data:`NEG` = hidden), pre-tiled for
  :func:`static_attention`, which :func:`use_static_attention` installs as the model's attention
  implementation (rank-4 matmul + add + softmax + matmul; no sdpa, no HF mask building). This
  switches the model's ``config._attn_implementation``; HF's own forwards keep working (masks
  come from HF's eager mask function) and give the same results;
* ``position_embeddings`` from the family's rotary module (or learned positions added to the
  token embedding, see :data:`POSITION_EMBED`);
* a :class:`~mobiedit.forward.kv.RecordingKV` as ``past_key_values``: it prepends fixed past K/V
  and records the new K/V, so a graph is a pure function of its inputs (defined once in
  :mod:`mobiedit.forward.kv`, shared with the eager prefix graph; importable from here too).
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch

from mobiedit.errors import ModelLoadError
from mobiedit.families import Family, get_module, n_layers
from mobiedit.forward.kv import RecordingKV  # noqa: F401 - defined there, importable from here

#: learned absolute position embeddings (added to the token embedding), by family name
POSITION_EMBED: dict[str, str] = {"gpt2": "transformer.wpe"}
#: additive-mask value of a hidden key (HF's convention: the float32 minimum)
NEG = float(torch.finfo(torch.float32).min)


@dataclass(frozen=True)
class ModelDims:
    """Sizes the bundle and the programs' inputs are built from.

    d_in / d_out: input / output size of the edited ``mlp_out`` (key / value sizes).
    max_positions: the model's position limit (learned positions), or None.
    """

    vocab_size: int
    hidden_size: int
    d_in: int
    d_out: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    max_positions: int | None

    def manifest(self) -> dict:
        """The ``dims`` object of manifest.json."""
        return {"vocab_size": self.vocab_size, "hidden_size": self.hidden_size, "intermediate_size": self.d_in,
                "num_layers": self.num_layers, "num_heads": self.num_heads, "num_kv_heads": self.num_kv_heads,
                "head_dim": self.head_dim, "d_out": self.d_out}


def model_dims(model: torch.nn.Module, family: Family, layer: int) -> ModelDims:
    """Read the sizes of ``model`` (HF config aliases make the attribute names family-neutral)."""
    cfg = model.config
    heads = int(cfg.num_attention_heads)
    kv = int(getattr(cfg, "num_key_value_heads", None) or heads)
    hidden = int(cfg.hidden_size)
    head_dim = int(getattr(cfg, "head_dim", None) or hidden // heads)
    weight = get_module(model, family.mlp_out, layer).weight
    d_out, d_in = weight.shape if family.weight_out_in else weight.shape[::-1]
    pos = get_module(model, POSITION_EMBED[family.name]).num_embeddings if family.name in POSITION_EMBED else None
    lm_head = get_module(model, family.lm_head)
    return ModelDims(vocab_size=int(lm_head.out_features), hidden_size=hidden, d_in=int(d_in), d_out=int(d_out),
                     num_layers=n_layers(model, family), num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
                     max_positions=pos)


#: name under which :func:`static_attention` is registered with transformers' AttentionInterface
ATTENTION = "mobiedit_static"


def static_attention(module: torch.nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                     attention_mask: torch.Tensor | None, scaling: float | None = None, dropout: float = 0.0,
                     **_kwargs) -> tuple[torch.Tensor, None]:
    """Attention with rank-4 tensors only and no K/V head repetition (NPU- and XNNPACK-friendly).

    GQA folds the ``r = H / Hkv`` query heads sharing a K/V head into the query axis:
    ``q [B, H, Q, hd] → [B, Hkv, r·Q, hd]``, so scores are one matmul against the unrepeated keys.
    ``attention_mask`` is additive float ``[B, 1, r·Q, K]`` (pre-tiled, see :func:`tile_mask`) or
    ``[B, 1, Q, K]`` / boolean (tiled here). Returns ``([B, Q, H, hd], None)`` like HF's functions.
    """
    B, H, Q, hd = query.shape
    Hkv = key.shape[1]
    r = H // Hkv
    scale = hd ** -0.5 if scaling is None else scaling
    Kn = key.shape[2]
    q = query.reshape(B * Hkv, r * Q, hd)  # explicit rank-3 bmm: no broadcast expands in the graph
    scores = torch.bmm(q, key.reshape(B * Hkv, Kn, hd).transpose(1, 2)).reshape(B, Hkv, r * Q, Kn) * scale
    if attention_mask is not None:
        mask = attention_mask if attention_mask.dtype != torch.bool else additive(attention_mask)
        if mask.shape[-2] != r * Q:
            mask = tile_mask(mask, r)
        scores = scores + mask
    probs = torch.softmax(scores.float(), dim=-1).to(value.dtype).reshape(B * Hkv, r * Q, Kn)
    out = torch.bmm(probs, value.reshape(B * Hkv, Kn, hd)).reshape(B, H, Q, hd).transpose(1, 2).contiguous()
    return out, None


def tile_mask(mask: torch.Tensor, r: int) -> torch.Tensor:
    """[B, 1, Q, K] → [B, 1, r·Q, K] (row j·Q + q is row q): the mask of :func:`static_attention`."""
    return mask if r == 1 else torch.cat([mask] * r, dim=2)


def use_static_attention(model: torch.nn.Module) -> None:
    """Switch ``model``'s attention to :func:`static_attention` (registered once with transformers)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    if ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(ATTENTION, static_attention)
        AttentionMaskInterface.register(ATTENTION, eager_mask)  # HF's own forwards: additive masks
    if getattr(model.config, "_attn_implementation", None) != ATTENTION:
        model.set_attn_implementation(ATTENTION)


def gqa_groups(dims: "ModelDims") -> int:
    """Query heads per K/V head (the mask tiling factor)."""
    return dims.num_heads // dims.num_kv_heads


#: attribute name of the :class:`RankOneSlots` module of every program (a float island)
SLOTS = "slots"


class RankOneSlots(torch.nn.Module):
    """``y + Σ_s (w_s · x) u_s`` as batched matmuls of activations (delegable, rank 3).

    A module of its own so the slot arithmetic has its own module path (``slots``, a float island)
    and is never mistaken for part of the ``nn.Linear`` it is added to by export passes.
    """

    def forward(self, x: torch.Tensor, y: torch.Tensor, slot_u: torch.Tensor, slot_w: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(1, -1, x.shape[-1])
        coef = torch.bmm(flat, slot_w.transpose(0, 1).unsqueeze(0))
        return y + torch.bmm(coef, slot_u.unsqueeze(0)).reshape(y.shape)


@contextlib.contextmanager
def rank_one_slots(module: torch.nn.Module, slots: RankOneSlots, slot_u: torch.Tensor, slot_w: torch.Tensor,
                   seen: dict | None = None) -> Iterator[None]:
    """Inside the block, ``module``'s output ``y = W x`` becomes ``slots(x, y) = y + Σ_s (w_s · x) u_s``.

    ``slot_u`` [slots, d_out], ``slot_w`` [slots, d_in]; zero rows are empty slots. When ``seen``
    is given it receives ``"key"`` (the input x) and ``"value"`` (the slotted output) of the last
    call. The hook is removed on exit, even on error.
    """

    def hook(_mod, args, out):
        y = slots(args[0], out, slot_u, slot_w)
        if seen is not None:
            seen["key"], seen["value"] = args[0], y
        return y

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def embed(model: torch.nn.Module, family: Family, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Token embedding (+ learned position embedding where the family has one)."""
    x = get_module(model, family.embed)(tokens)
    if family.name in POSITION_EMBED:
        x = x + get_module(model, POSITION_EMBED[family.name])(positions)
    return x


def rotary(model: torch.nn.Module, family: Family, x: torch.Tensor, positions: torch.Tensor
           ) -> tuple[torch.Tensor, torch.Tensor] | None:
    """(cos, sin) [B, Q, head_dim] of ``positions`` [B, Q] from the family's rotary module, or None."""
    if family.rotary is None:
        return None
    return get_module(model, family.rotary)(x, positions)


def additive(mask: torch.Tensor) -> torch.Tensor:
    """Boolean mask (True = may attend) -> additive float32 mask (0 / :data:`NEG`)."""
    zero = torch.zeros((), dtype=torch.float32)
    return torch.where(mask, zero, torch.full((), NEG, dtype=torch.float32))


def blocks(model: torch.nn.Module, family: Family, first: int) -> list[torch.nn.Module]:
    """Decoder blocks ``first .. L-1`` (shared with ``model``)."""
    return [get_module(model, family.layer, i) for i in range(first, n_layers(model, family))]


def run_blocks(mods: list[torch.nn.Module], x: torch.Tensor, mask: torch.Tensor,
               pe: tuple[torch.Tensor, torch.Tensor] | None, cache: RecordingKV) -> torch.Tensor:
    """Run HF decoder blocks with an additive ``mask``, rotary ``pe`` and ``cache``."""
    for blk in mods:
        out = blk(x, attention_mask=mask, position_embeddings=pe, past_key_values=cache)
        x = out[0] if isinstance(out, tuple) else out
    return x


def check_positions(dims: ModelDims, needed: int, where: str) -> None:
    """Refuse shapes that need more positions than a learned position table has."""
    if dims.max_positions is not None and needed > dims.max_positions:
        raise ModelLoadError(f"needs {needed} positions, the model has {dims.max_positions}", where=where,
                             fix="lower max_seq_len / edit token sizes")
