"""Architecture differences as data: one row per model family.

A :class:`Family` names, with ``{}`` standing for the layer index, the modules that editing and the
forward-only graphs touch. Code looks modules up through these templates and never branches on a
model's name. The row is chosen by the checkpoint's ``config.model_type`` (a field of the HF
config, not a guess from the folder name).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import ModelLoadError


@dataclass(frozen=True)
class Family:
    """Module-name templates of one transformer family.

    Attributes:
        name: family id recorded in journals and bundles.
        layers: the ModuleList of decoder blocks.
        layer: one decoder block (``{}`` = index).
        mlp_out: the MLP's output projection whose weight ROME edits (``down_proj`` / ``c_proj``).
            Its *input* is the key ``k`` and its *output* the value ``v``.
        attn: the attention sub-module of a block (for attention maps).
        embed: token embedding.
        final_norm: the norm before the LM head.
        lm_head: the output projection to the vocabulary.
        rotary: the rotary-embedding module shared by all blocks, or ``None`` (learned positions).
        weight_out_in: True when ``mlp_out.weight`` is ``[out, in]`` (``nn.Linear``); False for
            GPT-2's ``Conv1D`` whose weight is ``[in, out]``.
        n_layers_attr / hidden_attr: config attribute names for depth and width.
    """

    name: str
    layers: str
    layer: str
    mlp_out: str
    attn: str
    embed: str
    final_norm: str
    lm_head: str
    rotary: str | None
    weight_out_in: bool
    n_layers_attr: str = "num_hidden_layers"
    hidden_attr: str = "hidden_size"


_LLAMA_LIKE = dict(
    layers="model.layers",
    layer="model.layers.{}",
    mlp_out="model.layers.{}.mlp.down_proj",
    attn="model.layers.{}.self_attn",
    embed="model.embed_tokens",
    final_norm="model.norm",
    lm_head="lm_head",
    rotary="model.rotary_emb",
    weight_out_in=True,
)

FAMILIES: dict[str, Family] = {
    "llama": Family(name="llama", **_LLAMA_LIKE),
    "qwen2": Family(name="qwen2", **_LLAMA_LIKE),
    "qwen3": Family(name="qwen3", **_LLAMA_LIKE),
    "mistral": Family(name="mistral", **_LLAMA_LIKE),
    "gpt2": Family(
        name="gpt2",
        layers="transformer.h",
        layer="transformer.h.{}",
        mlp_out="transformer.h.{}.mlp.c_proj",
        attn="transformer.h.{}.attn",
        embed="transformer.wte",
        final_norm="transformer.ln_f",
        lm_head="lm_head",
        rotary=None,
        weight_out_in=False,
        n_layers_attr="n_layer",
        hidden_attr="n_embd",
    ),
}


def family_for(model_type: str) -> Family:
    """Return the family row for an HF ``config.model_type``.

    Raises:
        ModelLoadError: the type has no row; the message lists the supported types.
    """
    try:
        return FAMILIES[model_type]
    except KeyError:
        raise ModelLoadError(
            f"model_type '{model_type}' has no family row",
            where="config.json, field 'model_type'",
            fix=f"use one of {sorted(FAMILIES)} or add a row to mobiedit.families.FAMILIES",
        ) from None


def get_module(model: torch.nn.Module, template: str, layer: int | None = None) -> torch.nn.Module:
    """Look up ``template`` (formatted with ``layer``) in ``model``."""
    name = template.format(layer) if layer is not None else template
    try:
        return model.get_submodule(name)
    except AttributeError:
        raise ModelLoadError(f"module '{name}' not found", where="family template",
                             fix="check the family row in mobiedit.families") from None


def edit_weight(model: torch.nn.Module, family: Family, layer: int) -> torch.nn.Parameter:
    """The edited matrix of ``layer`` (``mlp_out.weight``), in the module's own layout."""
    return get_module(model, family.mlp_out, layer).weight


def n_layers(model: torch.nn.Module, family: Family) -> int:
    return int(getattr(model.config, family.n_layers_attr))


def hidden_size(model: torch.nn.Module, family: Family) -> int:
    return int(getattr(model.config, family.hidden_attr))
