"""Load a causal LM and its tokenizer from a local Hugging Face folder — never from a hub.

Only safetensors weights are accepted (a pickled ``pytorch_model.bin`` can run code on load).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from .atomic import recover_dir
from .errors import ModelLoadError, one_line
from .families import Family, check_supported, family_for
from .jsonio import JSONProblem, loads_strict
from .weights_check import check_config_against_weights, check_regular_files

log = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    """A model, its tokenizer, its family row and the folder it came from."""

    model: torch.nn.Module
    tokenizer: object
    family: Family
    path: Path

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device


def read_config(path: str | os.PathLike) -> dict:
    """Read ``config.json`` of a model folder, with a clear error when it is missing or broken."""
    cfg_path = Path(path) / "config.json"
    if not cfg_path.exists():
        raise ModelLoadError("no config.json", where=str(path),
                             fix="pass a Hugging Face model folder (config.json, model.safetensors, tokenizer files)")
    if not cfg_path.is_file() or cfg_path.stat().st_size > (16 << 20):
        raise ModelLoadError("not a regular file of at most 16 MB", where=str(cfg_path),
                             fix="restore the file from the original checkpoint")
    try:
        cfg = loads_strict(cfg_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, JSONProblem) as e:  # malformed, duplicate key, too deep, huge number
        raise ModelLoadError(f"config.json is not readable JSON ({type(e).__name__}: {one_line(e)})",
                             where=str(cfg_path), fix="restore the file from the original checkpoint") from None
    if not isinstance(cfg, dict):
        raise ModelLoadError(f"config.json holds a JSON {type(cfg).__name__}, not an object", where=str(cfg_path),
                             fix="restore the file from the original checkpoint")
    return cfg


def _check_safe_weights(path: Path) -> None:
    names = {p.name for p in path.iterdir()}
    has_st = any(n.endswith(".safetensors") for n in names)
    pickled = sorted(n for n in names if n.endswith((".bin", ".pt", ".pth", ".ckpt", ".pkl")))
    if not has_st:
        raise ModelLoadError(
            "no *.safetensors weights" + (f" (found pickled {pickled})" if pickled else ""),
            where=str(path),
            fix="convert the checkpoint to safetensors (pickled checkpoints can run code and are refused)",
        )


def _all_finite(t: torch.Tensor) -> bool:
    """No NaN/Inf in a float tensor; for a quantized tensor subclass (e.g. a pre-quantized torchao
    checkpoint's ``Int8Tensor``), in its float inner tensors (scales); integer data is always finite."""
    if type(t) in (torch.Tensor, torch.nn.Parameter):
        # in chunks: one isfinite over a 0.5 GB embedding would add ~1 GB of temporaries to the peak
        return not t.is_floating_point() or all(bool(torch.isfinite(c).all())
                                                for c in t.detach().reshape(-1).split(1 << 22))
    flatten = getattr(t, "__tensor_flatten__", None)
    if flatten is None:
        return True
    return all(_all_finite(getattr(t, n)) for n in flatten()[0])


def require_model_dir(path: str | os.PathLike, fix: str = "pass a local folder; hub downloads are disabled") -> Path:
    """``path`` as an existing folder — after finishing an interrupted :func:`~mobiedit.atomic.atomic_dir`
    replacement of it — else a ModelLoadError naming it, with ``fix``."""
    path = Path(path)
    if not path.exists():
        recover_dir(path)  # a crash inside atomic_dir's non-atomic fallback left the folder aside
    if not path.is_dir():
        raise ModelLoadError("model folder does not exist", where=str(path), fix=fix)
    return path


def load_model(path: str | os.PathLike, *, device: torch.device | str = "cpu",
               dtype: torch.dtype = torch.float32) -> LoadedModel:
    """Load model + tokenizer from a local folder, offline, safetensors only.

    The returned model is in eval mode with gradients disabled on every parameter (editing code
    enables what it needs explicitly).
    """
    path = require_model_dir(path)
    check_regular_files(path)  # before any open: a FIFO would block, /dev/zero never end
    cfg = read_config(path)
    family = family_for(str(cfg.get("model_type", "")))
    _check_safe_weights(path)
    check_config_against_weights(path, cfg, family)  # before transformers builds a module from cfg
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from .quant_io import narrow_loaded, read_sidecar

    side = read_sidecar(path)  # a `mobiedit quantize` folder with a bf16-stored head: load it narrow
    narrow = side is not None and side["head_dtype"] != "float32"
    try:
        model, info = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.bfloat16 if narrow else dtype, local_files_only=True, use_safetensors=True,
            trust_remote_code=False, output_loading_info=True)
        tok = AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=False)
    except Exception as e:  # noqa: BLE001 - any library failure on these files means "cannot load"
        if "ignore_mismatched_sizes" in str(e):  # its text points at a report the CLI never shows
            raise ModelLoadError("weights do not match config.json: tensor shapes differ", where=str(path),
                                 fix="use the config.json that belongs to these weights") from None
        raise ModelLoadError(f"cannot load ({type(e).__name__}: {one_line(e)})", where=str(path),
                             fix="check that the folder is a complete, uncorrupted HF checkpoint") from None
    for kind in ("missing_keys", "unexpected_keys", "mismatched_keys"):
        keys = sorted(str(k) for k in info.get(kind) or ())
        if keys:  # HF would silently run randomly initialised / dropped weights
            raise ModelLoadError(f"weights do not match config.json: {len(keys)} {kind.replace('_', ' ')} "
                                 f"(e.g. {keys[:3]})", where=str(path),
                                 fix="use the config.json that belongs to these weights (incomplete or mixed checkpoint?)")
    check_supported(model.config, family, str(path / "config.json"))
    if narrow:  # never upcast the 0.5 GB head just to narrow it again
        model = narrow_loaded(model, family, path, side)
    for name, param in model.named_parameters():
        if not _all_finite(param):
            raise ModelLoadError(f"parameter {name!r} contains NaN/Inf", where=str(path),
                                 fix="restore the checkpoint; a model with non-finite weights cannot be edited")
    model.to(device).eval()
    for p in model.parameters():
        p.requires_grad_(False)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    log.info("loaded %s (%s, %.1fM params) from %s", family.name, type(model).__name__,
             sum(p.numel() for p in model.parameters()) / 1e6, path)
    return LoadedModel(model=model, tokenizer=tok, family=family, path=path)
