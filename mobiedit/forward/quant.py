"""Quantized copies of a model for the forward-only loop (torchao ``quantize_``).

Schemes:
  * ``none``  — the float model itself (no copy).
  * ``w8a16`` — int8 per-channel weights (``Int8WeightOnlyConfig``); activations stay in a
    16-bit-or-wider float (fp32 on this CPU), so the perturbation signal is never rounded away.
  * ``w8a8``  — int8 per-channel weights and int8 per-token dynamic activations
    (``Int8DynamicActivationInt8WeightConfig``).
The edited ``mlp_out`` of the edit layer and ``lm_head`` always stay float (the delta path);
``head_dtype`` "bfloat16" stores the head (and embedding) in bf16 but computes it in fp32
(:mod:`mobiedit.forward.head`) — half the memory of a big-vocabulary model's largest matrix.
Judge a scheme by :func:`centered_correlation` of its losses with the float graph's across K
perturbations, not by max error alone.
"""
from __future__ import annotations

import copy
import json
import logging
from dataclasses import dataclass

import torch

from ..errors import ConfigError
from ..families import Family
from .head import HEAD_DTYPES, head_dtype_of, head_param_names, lower_head

log = logging.getLogger(__name__)

SCHEMES = ("none", "w8a16", "w8a8")


@dataclass(frozen=True)
class QuantConfig:
    """Which quantization the loop's forwards run with."""

    scheme: str = "w8a16"
    head_dtype: str = "float32"

    def __post_init__(self) -> None:
        if self.scheme not in SCHEMES:
            raise ConfigError(f"unknown scheme {self.scheme!r}", where="quant.scheme", fix=f"use one of {SCHEMES}")
        head_dtype_of(self.head_dtype, "quant.head_dtype")


def float_islands(model: torch.nn.Module, family: Family, layer: int) -> set[str]:
    """Module names that must stay float: the edited ``mlp_out`` and ``lm_head``."""
    return {family.mlp_out.format(layer), family.lm_head}


def quantized_copy(model: torch.nn.Module, family: Family, layer: int, cfg: QuantConfig) -> torch.nn.Module:
    """A quantized deep copy of ``model`` (``model`` itself for ``none``); ``model`` is untouched."""
    if cfg.scheme == "none" and cfg.head_dtype == "float32":
        return model
    q = quantize_inplace(copy.deepcopy(model), family, layer, cfg)
    return lower_head(q, family, head_dtype_of(cfg.head_dtype, "quant.head_dtype"))


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


SIDECAR = "mobiedit-quant.json"  # what `mobiedit quantize` did; the loader needs head_dtype before loading


def read_sidecar(folder) -> dict | None:
    """The :data:`SIDECAR` of a pre-quantized folder, validated; None if the folder has none."""
    from pathlib import Path

    from ..errors import ModelLoadError

    p = Path(folder) / SIDECAR
    if not p.is_file():
        return None
    try:
        meta = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ModelLoadError(f"{SIDECAR} is not readable JSON ({type(e).__name__})", where=str(p),
                             fix="re-run `mobiedit quantize`") from None
    if not isinstance(meta, dict) or meta.get("head_dtype") not in HEAD_DTYPES:
        raise ModelLoadError(f"{SIDECAR} needs head_dtype in {sorted(HEAD_DTYPES)}", where=str(p),
                             fix="re-run `mobiedit quantize`")
    return meta


def restore_float_params(model: torch.nn.Module, folder, skip: set[str]) -> int:
    """Reload, exactly as stored, every plain float parameter not in ``skip`` from the folder's
    safetensors (after a bf16 ``from_pretrained`` rounded them); returns how many were restored."""
    from pathlib import Path

    from safetensors import safe_open

    want = {n: p for n, p in model.named_parameters()
            if type(p.data) is torch.Tensor and p.is_floating_point() and n not in skip}
    done = 0
    for f in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(f), "pt") as st:
            for key in st.keys():
                if key in want:
                    want[key].data = st.get_tensor(key)
                    done += 1
    return done


def lower_loaded(model: torch.nn.Module, family: Family, folder, meta: dict) -> torch.nn.Module:
    """Finish loading a bf16-loaded pre-quantized model: fp32 islands back, head as ChunkedHead."""
    skip = head_param_names(family)
    n = restore_float_params(model, folder, skip)
    log.info("restored %d fp32 parameters; head stored as %s", n, meta["head_dtype"])
    return lower_head(model, family, head_dtype_of(meta["head_dtype"], SIDECAR))
