"""``mobiedit quantize``: write a pre-quantized Hugging Face checkpoint (the phone's copy).

Apart from :mod:`mobiedit.forward.quant` because it reads model folders (:mod:`mobiedit.models`),
which itself loads such checkpoints through ``quant`` — keeping that edge one-way.
"""
from __future__ import annotations

import json
import logging

import torch

from ..errors import ConfigError
from ..head import head_dtype_of
from ..quant_io import SIDECAR
from .quant import SAVED_SCHEMES, QuantConfig

log = logging.getLogger(__name__)


def save_quantized(model_dir, out, layer: int, cfg: QuantConfig, overwrite: bool = False):
    """Write a pre-quantized Hugging Face checkpoint of ``model_dir`` to ``out`` (atomically).

    transformers' ``TorchAoConfig`` quantizes each linear weight as it loads (int8 per-channel;
    ``w8a8`` also records dynamic int8 activations) except the float islands of ``layer``; the
    folder loads with plain ``from_pretrained`` and never holds float copies of the quantized
    layers — the memory picture of a phone that ships the quantized model. With ``head_dtype``
    bfloat16 the head and embedding are stored in bf16 and ``SIDECAR`` says so, which
    :func:`mobiedit.models.load_model` reads to load them without an fp32 upcast. ``out`` passes
    :func:`mobiedit.outputs.check_output_dir` first (``overwrite``).
    """
    from pathlib import Path

    from torchao.quantization import Int8DynamicActivationInt8WeightConfig, Int8WeightOnlyConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TorchAoConfig

    from ..atomic import atomic_dir
    from ..families import family_for, get_module
    from ..models import read_config
    from ..outputs import check_output_dir, mark_output, weights_bytes
    from ..profile import copy_sidecars

    if cfg.scheme not in SAVED_SCHEMES:
        raise ConfigError(f"scheme {cfg.scheme!r} writes no quantized checkpoint (it is a loop-only forward)",
                          where="--scheme", fix=f"use one of {SAVED_SCHEMES}")
    dtype = head_dtype_of(cfg.head_dtype, "--head-dtype")
    src = Path(model_dir)
    check_output_dir(out, "quantize", (src,), overwrite, need_bytes=weights_bytes(src) // 4)
    family = family_for(str(read_config(src).get("model_type", "")))
    islands = [family.mlp_out.format(layer), family.lm_head]
    tcfg = Int8WeightOnlyConfig() if cfg.scheme == "w8a16" else Int8DynamicActivationInt8WeightConfig()
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32, local_files_only=True, use_safetensors=True,
                                                 quantization_config=TorchAoConfig(quant_type=tcfg,
                                                                                   modules_to_not_convert=islands))
    with torch.no_grad():  # narrow the stored head/embedding in place (a tied pair stays one tensor)
        for name in (family.lm_head, family.embed):
            w = get_module(model, name).weight
            w.data = w.data.to(dtype)
    tok = AutoTokenizer.from_pretrained(src, local_files_only=True)
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        mark_output(tmp, "quantize")
        (Path(tmp) / SIDECAR).write_text(json.dumps({"format": 1, "scheme": cfg.scheme, "layer": layer,
                                                     "head_dtype": cfg.head_dtype}))
        copy_sidecars(src, tmp)
    log.info("wrote %s (%s, float: %s, head %s)", out, cfg.scheme, islands, cfg.head_dtype)
    return Path(out)
