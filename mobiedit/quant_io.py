"""Loading a ``mobiedit quantize`` folder: its sidecar (:data:`SIDECAR`, what the quantizer did)
and the float parameters a bf16 ``from_pretrained`` rounded, put back exactly as stored. Model I/O,
read by :func:`mobiedit.models.load_model`; written by :mod:`mobiedit.forward.quant_save`."""
from __future__ import annotations

import json
import logging

import torch

from .families import Family
from .head import HEAD_DTYPES, head_dtype_of, head_param_names, narrow_head

log = logging.getLogger(__name__)

SIDECAR = "mobiedit-quant.json"  # what `mobiedit quantize` did; the loader needs head_dtype before loading


def read_sidecar(folder) -> dict | None:
    """The :data:`SIDECAR` of a pre-quantized folder, validated; None if the folder has none."""
    from pathlib import Path

    from .errors import ModelLoadError

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


def narrow_loaded(model: torch.nn.Module, family: Family, folder, meta: dict) -> torch.nn.Module:
    """Finish loading a bf16-loaded pre-quantized model: fp32 islands back, head as ChunkedHead."""
    skip = head_param_names(family)
    n = restore_float_params(model, folder, skip)
    log.info("restored %d fp32 parameters; head stored as %s", n, meta["head_dtype"])
    return narrow_head(model, family, head_dtype_of(meta["head_dtype"], SIDECAR))
