"""Glue between a Hugging Face causal LM and the static-shape export graphs.

Everything model-specific is looked up through the family templates (:mod:`mobiedit.families`)
plus the one table below; no code branches on a model's name. The export graphs call the HF
decoder blocks themselves (so every family-specific detail — biases, GQA, q/k norms — is the HF
code's), but they build masks and positions themselves and hand the blocks:

* an *additive* float mask ``[B, 1, Q, K]`` (0 = visible, :data:`NEG` = hidden) for the HF
  ``eager`` attention (matmul + add + softmax + matmul; no sdpa, no HF mask building);
* ``position_embeddings`` from the family's rotary module (or learned positions added to the
  token embedding, see :data:`POSITION_EMBED`);
* a :class:`RecordingKV` as ``past_key_values``: it prepends fixed past K/V and records the new
  K/V, so a graph is a pure function of its inputs.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Iterator

import torch

from mobiedit.errors import ModelLoadError
from mobiedit.families import Family, get_module, n_layers

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
    return ModelDims(vocab_size=int(lm_head.weight.shape[0]), hidden_size=hidden, d_in=int(d_in), d_out=int(d_out),
                     num_layers=n_layers(model, family), num_heads=heads, num_kv_heads=kv, head_dim=head_dim,
                     max_positions=pos)


def use_eager_attention(model: torch.nn.Module) -> None:
    """Switch ``model`` to HF's eager attention (plain matmul/softmax; additive float masks)."""
    if getattr(model.config, "_attn_implementation", None) != "eager":
        model.set_attn_implementation("eager")


class RecordingKV:
    """The cache object HF attention calls: ``update(k, v, i)`` returns ``past[i] ⊕ (k, v)`` along
    the sequence axis (or just ``(k, v)`` without a past) and records ``(k, v)`` in :attr:`new`."""

    def __init__(self, past: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None) -> None:
        self.past = past or {}
        self.new: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int, *args, **kwargs):
        self.new[layer_idx] = (k, v)
        if layer_idx not in self.past:
            return k, v
        pk, pv = self.past[layer_idx]
        return torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)


@contextlib.contextmanager
def rank_one_slots(module: torch.nn.Module, slot_u: torch.Tensor, slot_w: torch.Tensor,
                   seen: dict | None = None) -> Iterator[None]:
    """Inside the block, ``module``'s output ``y = W x`` becomes ``y + Σ_s (w_s · x) u_s``.

    ``slot_u`` [slots, d_out], ``slot_w`` [slots, d_in]; zero rows are empty slots. When ``seen``
    is given it receives ``"key"`` (the input x) and ``"value"`` (the slotted output) of the last
    call. The hook is removed on exit, even on error.
    """

    def hook(_mod, args, out):
        x = args[0]
        y = out + torch.matmul(torch.matmul(x, slot_w.transpose(0, 1)), slot_u)
        if seen is not None:
            seen["key"], seen["value"] = x, y
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
