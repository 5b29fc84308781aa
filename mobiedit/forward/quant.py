"""Quantized copies of a model for the forward-only loop (torchao ``quantize_``).

Schemes:
  * ``none``  — the float model itself (no copy).
  * ``w8a16`` — int8 per-channel weights (``Int8WeightOnlyConfig``); activations stay in a
    16-bit-or-wider float (fp32 on this CPU), so the perturbation signal is never rounded away.
  * ``w8a8``  — int8 per-channel weights and int8 per-token dynamic activations
    (``Int8DynamicActivationInt8WeightConfig``).
  * ``bf16``  — weights stored bf16; each matmul takes bf16 operands and accumulates in fp32
    (oneDNN: AMX/AVX512-BF16 where the CPU has them, ~4x fp32's throughput on this box), its
    output cast back to fp32, so norms, attention, the residual stream and the delta stay fp32.
    An NPU's fp16/bf16 matmul path, emulated on the desktop. Loop-only: not a checkpoint format.
The edited ``mlp_out`` of the edit layer and ``lm_head`` always stay float (the delta path);
``head_dtype`` "bfloat16" stores the head (and embedding) in bf16 but computes it in fp32
(:mod:`mobiedit.head`) — half the memory of a big-vocabulary model's largest matrix.
``head_matmul`` "bf16" runs the loop's LM-head read-out mostly on bf16 operands: the read-out of
the K deltas' mean in fp32, each delta's difference from it on bf16 (:func:`low_head`,
:func:`mobiedit.forward.graph._readout`), so the rounding is relative to the perturbation's own
change of the logits, not to the logits — on a 262k-vocabulary model the read-out is half a step.
Judge a scheme by :func:`centered_correlation` of its losses with the float graph's across K
perturbations, not by max error alone.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass
from typing import Sequence

import torch

from ..errors import ConfigError
from ..families import Family
from ..head import head_dtype_of, narrow_head

log = logging.getLogger(__name__)

SCHEMES = ("none", "w8a16", "w8a8", "bf16")
#: schemes a pre-quantized checkpoint (`mobiedit quantize`) can be saved in
SAVED_SCHEMES = ("w8a16", "w8a8")


@dataclass(frozen=True)
class QuantConfig:
    """Which quantization the loop's forwards run with."""

    scheme: str = "w8a16"
    head_dtype: str = "float32"
    head_matmul: str = "float32"

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"unknown scheme {self.scheme!r}", where="quant.scheme", fix=f"use one of {SCHEMES}")
        head_dtype_of(self.head_dtype, "quant.head_dtype")
        if self.head_matmul not in HEAD_MATMULS:
            raise ConfigError(f"unknown head matmul {self.head_matmul!r}", where="quant.head_matmul",
                              fix=f"use one of {HEAD_MATMULS} (bf16: the read-out's differences on bf16 operands)")


#: how the loop's read-out multiplies by the LM head: all fp32, or the deltas' differences from their mean in bf16
HEAD_MATMULS = ("float32", "bf16")
#: the attribute of the forward model's head module holding its bf16 weight (:func:`low_head`)
LOW_WEIGHT = "weight_bf16"


def low_head(head: torch.nn.Module) -> torch.Tensor | None:
    """The bf16 weight the read-out multiplies the deltas' differences by, when the forward model
    was built with ``head_matmul`` "bf16"; None otherwise (every logit in fp32)."""
    return getattr(head, LOW_WEIGHT, None)


def float_islands(model: torch.nn.Module, family: Family, layer: int | Sequence[int]) -> set[str]:
    """Module names that must stay float: the edited ``mlp_out`` (of each layer an edit writes,
    ``layer`` a sequence with ``update.spread``) and ``lm_head``."""
    layers = [layer] if isinstance(layer, int) else list(layer)
    return {family.mlp_out.format(i) for i in layers} | {family.lm_head}


def quantized_copy(model: torch.nn.Module, family: Family, layer: int | Sequence[int], cfg: QuantConfig) -> torch.nn.Module:
    """A quantized deep copy of ``model`` (``model`` itself for ``none``); ``model`` is untouched.

    The copy never holds a float duplicate of a matrix it quantizes: those weights enter the copy
    as ``model``'s own tensors (:func:`replaced_weights`) and are then replaced, one module at a
    time, by new quantized (or narrowed) tensors — so building it costs the float model plus the
    quantized copy, not twice the float model. A float head and token embedding (which no edit
    writes) stay ``model``'s own tensors; every other tensor of the copy is its own (the edited
    ``mlp_out`` island in particular, which :meth:`~mobiedit.session.EditSession.sync_forward` writes).
    """
    if cfg.scheme == "none" and cfg.head_dtype == "float32" and cfg.head_matmul == "float32":
        return model
    head_dtype = head_dtype_of(cfg.head_dtype, "quant.head_dtype")
    replaced = replaced_weights(model, family, layer, cfg)
    shared = replaced + ([] if head_dtype != torch.float32 else read_only_weights(model, family))
    q = quantize_inplace(copy.deepcopy(model, {id(w): w for w in shared}), family, layer, cfg)
    q = narrow_head(q, family, head_dtype)
    if cfg.head_matmul == "bf16":  # the copy's own head module: the float model's stays as it is
        from ..families import get_module

        head = get_module(q, family.lm_head)
        w = head.weight.detach()
        head.register_buffer(LOW_WEIGHT, w if w.dtype == torch.bfloat16 else w.to(torch.bfloat16), persistent=False)
    left = {id(w) for w in replaced} & {id(p) for p in q.parameters()}
    if left:  # a weight the copy was to replace is still the float model's (a family the schemes miss)
        raise ConfigError(f"{len(left)} weights of the quantized copy are still the float model's",
                          where="quant.scheme", fix="report this model's family; use quant.scheme none meanwhile")
    return q


def read_only_weights(model: torch.nn.Module, family: Family) -> list[torch.nn.Parameter]:
    """The weights no edit writes and the search never changes: the LM head's and the token
    embedding's (one tensor when tied)."""
    from ..families import get_module

    return [get_module(model, family.lm_head).weight, get_module(model, family.embed).weight]


def replaced_weights(model: torch.nn.Module, family: Family, layer: int | Sequence[int],
                     cfg: QuantConfig) -> list[torch.nn.Parameter]:
    """The weights of ``model`` that :func:`quantized_copy` replaces in its copy: every linear
    weight outside the float islands (for a scheme other than ``none``), and the head and token
    embedding when ``cfg.head_dtype`` narrows them."""
    out = []
    if cfg.scheme != "none":
        keep = float_islands(model, family, layer)
        out += [m.weight for _, m in quantized_linears(model, keep, cfg.scheme)]
    if cfg.head_dtype != "float32":
        out += read_only_weights(model, family)
    return out


def quantizes(mod: torch.nn.Module, fqn: str, keep: set[str], scheme: str) -> bool:
    """Whether ``scheme`` quantizes module ``fqn``: a linear layer outside the float islands ``keep``
    (``bf16`` leaves a layer already stored in bf16 as it is). The one rule :func:`quantize_inplace`,
    :func:`bf16_matmuls` and :func:`replaced_weights` share."""
    return (isinstance(mod, torch.nn.Linear) and fqn not in keep
            and not (scheme == "bf16" and mod.weight.dtype == torch.bfloat16))


def quantized_linears(model: torch.nn.Module, keep: set[str], scheme: str) -> list[tuple[str, torch.nn.Module]]:
    """``(fqn, module)`` of every module :func:`quantizes` picks, in module order."""
    return [(fqn, mod) for fqn, mod in model.named_modules() if quantizes(mod, fqn, keep, scheme)]


def quantize_inplace(q: torch.nn.Module, family: Family, layer: int | Sequence[int], cfg: QuantConfig) -> torch.nn.Module:
    """Quantize ``q``'s linear layers in place (except the float islands); returns ``q``.

    This is the phone's memory picture: no float copy of the quantized layers is kept.
    """
    if cfg.scheme == "none":
        return q
    if cfg.scheme == "bf16":
        return bf16_matmuls(q, float_islands(q, family, layer))
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

    keep = float_islands(q, family, layer)
    tcfg = Int8WeightOnlyConfig() if cfg.scheme == "w8a16" else Int8DynamicActivationInt8WeightConfig()
    n = [0]

    def pick(mod: torch.nn.Module, fqn: str) -> bool:
        ok = quantizes(mod, fqn, keep, cfg.scheme)
        n[0] += ok
        return ok

    quantize_(q, tcfg, filter_fn=pick)
    log.info("quantized %d linear layers to %s (float: %s)", n[0], cfg.scheme, sorted(keep))
    return q.eval()


def _to_bf16(mod: torch.nn.Module, args: tuple) -> tuple:
    return (args[0].to(torch.bfloat16),) + tuple(args[1:])


def _to_input_dtype(mod: torch.nn.Module, args: tuple, out: torch.Tensor) -> torch.Tensor:
    return out.to(mod.out_dtype)


def bf16_matmuls(q: torch.nn.Module, keep: set[str]) -> torch.nn.Module:
    """Store ``q``'s linear weights (except ``keep``) in bf16 and run them on bf16 operands: a
    pre-hook casts the input, a hook casts the output back to the weight's former dtype. In place;
    returns ``q``."""
    n = 0
    for _, mod in quantized_linears(q, keep, "bf16"):
        mod.out_dtype = mod.weight.dtype
        with torch.no_grad():  # new tensors (not ``Module.to``, which would rewrite a shared weight's data)
            for name in ("weight", "bias"):
                if (p := getattr(mod, name, None)) is not None:
                    setattr(mod, name, torch.nn.Parameter(p.detach().to(torch.bfloat16), requires_grad=p.requires_grad))
        mod.register_forward_pre_hook(_to_bf16)
        mod.register_forward_hook(_to_input_dtype)
        n += 1
    log.info("%d linear layers compute in bf16 (float: %s)", n, sorted(keep))
    return q.eval()


def centered_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two loss vectors across perturbations (means removed)."""
    a = a.double() - a.double().mean()
    b = b.double() - b.double().mean()
    den = a.norm() * b.norm()
    return float((a @ b) / den) if den > 0 else 0.0


def is_prequantized(model: torch.nn.Module) -> bool:
    """True for a model loaded from a pre-quantized checkpoint (:func:`save_quantized`)."""
    return getattr(getattr(model, "config", None), "quantization_config", None) is not None


def check_prequantized(model: torch.nn.Module, family: Family, layer: int) -> None:
    """A pre-quantized model can only be edited at a layer whose ``mlp_out`` it kept float."""
    from ..families import get_module

    w = get_module(model, family.mlp_out, layer).weight
    if type(w) not in (torch.Tensor, torch.nn.Parameter):
        raise ConfigError(f"{family.mlp_out.format(layer)} of this pre-quantized checkpoint is quantized "
                          f"({type(w).__name__}); the edit needs it float", where="mobiedit.layer",
                          fix="edit the layer the checkpoint was quantized for, or re-run `mobiedit quantize --layer N`")
