"""Second-moment statistics C = E[k kᵀ] of the edited matrix's inputs over a text corpus.

Cached as safetensors under the user cache, keyed by the weights' sha256, the layer and the
corpus hash, so each (model, layer, corpus) is computed once.
"""
from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from ..atomic import atomic_path
from ..errors import NumericalError
from ..families import Family, get_module
from ..hooks import record
from ..paths import cache_root

log = logging.getLogger(__name__)


def weights_digest(model_dir: Path) -> str:
    """sha256 over the folder's ``*.safetensors`` files (names and bytes), first 16 hex digits."""
    h = hashlib.sha256()
    for p in sorted(Path(model_dir).glob("*.safetensors")):
        h.update(p.name.encode())
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def second_moment(model, family: Family, layer: int, tok, texts: list[str], batch_size: int = 32,
                  progress: bool = False) -> torch.Tensor:
    """E[k kᵀ] over every non-pad token of ``texts`` (float64 accumulation, float32 result)."""
    mod = get_module(model, family.mlp_out, layer)
    dev = next(model.parameters()).device
    acc, n = None, 0
    for i in tqdm(range(0, len(texts), batch_size), desc=f"key stats L{layer}", disable=not progress):
        enc = tok(texts[i:i + batch_size], return_tensors="pt", padding=True, truncation=True, max_length=256)
        with torch.no_grad(), record(mod, outputs=False, stop=True) as rec:
            model(input_ids=enc["input_ids"].to(dev), attention_mask=enc["attention_mask"].to(dev))
        k = rec.input[enc["attention_mask"].to(dev).bool()].double()
        acc = k.T @ k if acc is None else acc + k.T @ k
        n += k.shape[0]
    if acc is None or n == 0:
        raise NumericalError("no tokens to compute key statistics from", where="stats corpus",
                             fix="pass a non-empty text corpus")
    c = (acc / n).float()
    if not torch.isfinite(c).all():
        raise NumericalError("non-finite key statistics", where=f"layer {layer}", fix="check the model weights")
    return c


def cached_second_moment(model, family: Family, layer: int, tok, texts: list[str], model_dir: Path,
                         progress: bool = False) -> torch.Tensor:
    """:func:`second_moment`, read from / written to the cache."""
    corpus = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    path = cache_root() / "stats" / f"{weights_digest(model_dir)}_L{layer}_{corpus}.safetensors"
    if path.is_file():
        return load_file(path)["mom2"]
    c = second_moment(model, family, layer, tok, texts, progress=progress)
    with atomic_path(path, suffix=".safetensors") as tmp:
        save_file({"mom2": c.contiguous()}, tmp)
    log.info("cached key statistics at %s", path)
    return c
