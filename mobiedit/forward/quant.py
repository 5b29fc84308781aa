"""Quantized copies of a model for the forward-only loop (torchao ``quantize_``).

Schemes:
  * ``none``  — the float model itself (no copy).
  * ``w8a16`` — int8 per-channel weights (``Int8WeightOnlyConfig``); activations stay in a
    16-bit-or-wider float (fp32 on this CPU), so the perturbation signal is never rounded away.
  * ``w8a8``  — int8 per-channel weights and int8 per-token dynamic activations
    (``Int8DynamicActivationInt8WeightConfig``).
The edited ``mlp_out`` of the edit layer and ``lm_head`` always stay float (the delta path).
Judge a scheme by :func:`centered_correlation` of its losses with the float graph's across K
perturbations, not by max error alone.
"""
from __future__ import annotations

import copy
import logging
from dataclasses import dataclass

import torch

from ..errors import ConfigError
from ..families import Family

log = logging.getLogger(__name__)

SCHEMES = ("none", "w8a16", "w8a8")


@dataclass(frozen=True)
class QuantConfig:
    """Which quantization the loop's forwards run with."""

    scheme: str = "w8a16"

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"unknown scheme {self.scheme!r}", where="quant.scheme", fix=f"use one of {SCHEMES}")


def float_islands(model: torch.nn.Module, family: Family, layer: int) -> set[str]:
    """Module names that must stay float: the edited ``mlp_out`` and ``lm_head``."""
    return {family.mlp_out.format(layer), family.lm_head}


def quantized_copy(model: torch.nn.Module, family: Family, layer: int, cfg: QuantConfig) -> torch.nn.Module:
    """A quantized deep copy of ``model`` (``model`` itself for ``none``); ``model`` is untouched."""
    if cfg.scheme == "none":
        return model
    return quantize_inplace(copy.deepcopy(model), family, layer, cfg)


def quantize_inplace(q: torch.nn.Module, family: Family, layer: int, cfg: QuantConfig) -> torch.nn.Module:
    """Quantize ``q``'s linear layers in place (except the float islands); returns ``q``.

    This is the phone's memory picture: no float copy of the quantized layers is kept.
    """
    if cfg.scheme == "none":
        return q
    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig, quantize_

    keep = float_islands(q, family, layer)
    tcfg = Int8WeightOnlyConfig() if cfg.scheme == "w8a16" else Int8DynamicActivationInt8WeightConfig()
    n = [0]

    def pick(mod: torch.nn.Module, fqn: str) -> bool:
        ok = isinstance(mod, torch.nn.Linear) and fqn not in keep
        n[0] += ok
        return ok

    quantize_(q, tcfg, filter_fn=pick)
    log.info("quantized %d linear layers to %s (float: %s)", n[0], cfg.scheme, sorted(keep))
    return q.eval()


def centered_correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    """Pearson correlation of two loss vectors across perturbations (means removed)."""
    a = a.double() - a.double().mean()
    b = b.double() - b.double().mean()
    den = a.norm() * b.norm()
    return float((a @ b) / den) if den > 0 else 0.0
