"""Architecture differences as data: one row per model family.

A :class:`Family` names, with ``{}`` standing for the layer index, the modules that editing and the
forward-only graphs touch. Code looks modules up through these templates and never branches on a
model's name. The row is chosen by the checkpoint's ``config.model_type`` (a field of the HF
config, not a guess from the folder name).
"""
from __future__ import annotations

import logging
from dataclasses import dataclass

import torch

from .errors import ConfigError, ModelLoadError

log = logging.getLogger(__name__)


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
        layer_types_attr: config attribute listing each layer's attention type (Gemma-3's
            ``layer_types``: ``sliding_attention`` / ``full_attention``), or ``None`` when all layers
            are alike. Where set, the rotary module is called with the layer's type (each type has
            its own RoPE base) and each block is run with its own type's tables.
        window_attr: config attribute of the sliding-attention window; the edit graphs (which keep
            every prefix key) are exact only for sequences within it, so longer ones are refused.
        unsupported: config attributes that must be unset/None for the edit graphs to be exact
            (e.g. a final-logit soft-cap the read-out does not apply).
        mlp_post_norm: the norm the MLP's output passes before it joins the residual stream
            (Gemma-3's ``post_feedforward_layernorm``; ``{}`` = index), or ``None`` where the
            output is added as it is. A value delta at ``mlp_out`` then reaches the residual as
            ``norm(v + δ) − norm(v)``, not ``δ``: the prefix graph applies it so
            (:mod:`mobiedit.forward.prefix`).
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
    layer_types_attr: str | None = None
    unsupported: tuple[str, ...] = ()
    mlp_post_norm: str | None = None
    window_attr: str | None = None


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
    # Gemma-3 text: scaled embeddings (inside its embedding module), sandwich norms, q/k norms,
    # sliding-window and full layers with their own RoPE bases — all inside the HF modules the
    # graphs run; only the per-layer rotary tables are data here.
    "gemma3_text": Family(name="gemma3_text", **_LLAMA_LIKE, layer_types_attr="layer_types",
                          window_attr="sliding_window", unsupported=("final_logit_softcapping", "attn_logit_softcapping"),
                          mlp_post_norm="model.layers.{}.post_feedforward_layernorm"),
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


def layer_types(model: torch.nn.Module, family: Family) -> list[str | None]:
    """Each layer's attention type (``None`` for every layer of a single-type family)."""
    L = n_layers(model, family)
    if family.layer_types_attr is None:
        return [None] * L
    types = list(getattr(model.config, family.layer_types_attr))
    if len(types) != L:
        raise ModelLoadError(f"{family.layer_types_attr} lists {len(types)} layers, the model has {L}",
                             where=f"config.json, field '{family.layer_types_attr}'",
                             fix="use the config.json that belongs to these weights")
    return types


def rotary_tables(model: torch.nn.Module, family: Family, x: torch.Tensor, positions: torch.Tensor
                  ) -> dict[str | None, tuple[torch.Tensor, torch.Tensor]]:
    """RoPE (cos, sin) of ``positions`` for every layer type of the model ({} without rotary)."""
    if family.rotary is None:
        return {}
    rot = get_module(model, family.rotary)
    return {t: rot(x, positions) if t is None else rot(x, positions, t)
            for t in sorted(set(layer_types(model, family)), key=str)}


def check_window(model: torch.nn.Module, family: Family, seq_len: int) -> None:
    """Refuse a sequence longer than a sliding-attention window (graphs keep every prefix key)."""
    if family.window_attr is None:
        return
    window = getattr(model.config, family.window_attr, None)
    if window is not None and seq_len > int(window):
        from .errors import RequestError

        raise RequestError(f"a {seq_len}-token edit prompt exceeds the model's sliding window of {window} tokens",
                           where="request prompts (with context templates)",
                           fix="use shorter prompts or context templates (profile 'context')")


def check_supported(config, family: Family, where: str) -> None:
    """Refuse a config that sets an attribute the edit graphs do not model (named in the row)."""
    for attr in family.unsupported:
        if getattr(config, attr, None) is not None:
            raise ModelLoadError(f"{attr} = {getattr(config, attr)} is not supported by the edit graphs",
                                 where=f"{where}, field '{attr}'",
                                 fix=f"use a {family.name} checkpoint without {attr}, or extend the read-out")


def n_layers(model: torch.nn.Module, family: Family) -> int:
    return int(getattr(model.config, family.n_layers_attr))


def check_edit_layer(model: torch.nn.Module, family: Family, layers: tuple[int, ...], warn_last: bool = True) -> None:
    """Refuse an edit layer the model does not have (a ConfigError naming ``--layer`` and the
    range, where the module lookup would only say a module is missing), and warn on the last layer:
    its MLP output at the subject's last token reaches no later position, so no search there can
    move the answer unless the subject ends the prompt."""
    count = n_layers(model, family)
    for layer in layers:
        if not 0 <= layer < count:
            raise ConfigError(f"edit layer {layer} is not a layer of this model ({count} layers, 0-{count - 1})",
                              where="--layer (or the model profile's edit_layer)",
                              fix=f"pass a layer in 0-{count - 1}; `mobiedit trace` suggests one")
    if warn_last and layers and layers[-1] == count - 1:
        log.warning("edit layer %d is the model's last: its MLP output at the subject's last token reaches no "
                    "later position, so an edit there moves no answer whose prompt goes on after the subject "
                    "(`mobiedit trace` suggests a layer)", layers[-1])


def hidden_size(model: torch.nn.Module, family: Family) -> int:
    return int(getattr(model.config, family.hidden_attr))
