"""Second-moment statistics C = E[k kᵀ] of the edited matrix's inputs over a text corpus.

Cached as safetensors under the user cache, keyed by the sha256 of the weights the layer's keys
depend on (:func:`key_inputs_digest`), the layer and the corpus hash, so each (model, layer,
corpus) is computed once — also for a saved model edited at that layer. The file's safetensors
metadata records where the text came from (name, version, licence: the ``source`` a caller passes), the
token and text counts, the corpus hash and the layer; :func:`stats_metadata` reads it back.
"""
from __future__ import annotations

import hashlib
import json
import logging
import time
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from tqdm import tqdm

from ..atomic import atomic_path
from ..digest import update_with_file
from ..errors import NumericalError, one_line
from ..families import Family, get_module
from ..hooks import record
from ..paths import cache_root

log = logging.getLogger(__name__)


def weights_digest(model_dir: Path) -> str:
    """sha256 over the folder's ``*.safetensors`` files (names and bytes), first 16 hex digits."""
    h = hashlib.sha256()
    for p in sorted(Path(model_dir).glob("*.safetensors")):
        h.update(p.name.encode())
        update_with_file(h, p)
    return h.hexdigest()[:16]


def second_moment(model, family: Family, layer: int, tok, texts: list[str], batch_size: int = 32,
                  progress: bool = False) -> torch.Tensor:
    """E[k kᵀ] over every non-pad token of ``texts`` (float64 accumulation, float32 result)."""
    return second_moment_counted(model, family, layer, tok, texts, batch_size, progress)[0]


def second_moment_counted(model, family: Family, layer: int, tok, texts: list[str], batch_size: int = 32,
                          progress: bool = False) -> tuple[torch.Tensor, int]:
    """:func:`second_moment` and the number of tokens it averaged over (texts cut at 256 tokens)."""
    mod = get_module(model, family.mlp_out, layer)
    dev = next(model.parameters()).device
    acc, n = None, 0
    with tqdm(total=len(texts), desc=f"key stats L{layer}", unit="text", disable=not progress) as bar:
        for i in range(0, len(texts), batch_size):
            enc = tok(texts[i:i + batch_size], return_tensors="pt", padding=True, truncation=True, max_length=256)
            with torch.no_grad(), record(mod, outputs=False, stop=True) as rec:
                model(input_ids=enc["input_ids"].to(dev), attention_mask=enc["attention_mask"].to(dev))
            k = rec.input[enc["attention_mask"].to(dev).bool()].double()
            acc = k.T @ k if acc is None else acc + k.T @ k
            n += k.shape[0]
            bar.update(len(texts[i:i + batch_size]))
            bar.set_postfix(tokens=n)
    if acc is None or n == 0:
        raise NumericalError("no tokens to compute key statistics from", where="stats corpus",
                             fix="pass a non-empty text corpus")
    c = (acc / n).float()
    if not torch.isfinite(c).all():
        raise NumericalError("non-finite key statistics", where=f"layer {layer}", fix="check the model weights")
    return c, n


def key_inputs_digest(model_dir: Path, family: Family, layer: int) -> str:
    """sha256 over the checkpoint tensors that decide ``layer``'s keys (what C averages): every tensor
    outside the decoder layers, the layers below ``layer``, and ``layer``'s own except its ``mlp_out``;
    first 16 hex digits. An edit of that ``mlp_out`` (or of any layer above) leaves the keys, C and
    this digest unchanged, so a saved edited model, re-edited or exported, reads the statistics of the
    model it came from. Layer tensors count by name, dtype, shape and bytes; the others by dtype, shape
    and bytes only — a tied embedding saved as ``lm_head.weight`` (safetensors' ``save_model`` keeps
    either name) is the same tensor. Names outside ``family.layers`` all count (a checkpoint named
    otherwise is keyed whole)."""
    prefix, edited = family.layers + ".", family.mlp_out.format(layer) + "."
    named, unnamed = hashlib.sha256(), []
    for p in sorted(Path(model_dir).glob("*.safetensors")):
        with safe_open(str(p), framework="pt") as fh:
            for name in sorted(fh.keys()):
                idx = name[len(prefix):].split(".", 1)[0] if name.startswith(prefix) else None
                if name.startswith(edited) or (idx is not None and idx.isdigit() and int(idx) > layer):
                    continue
                t = fh.get_tensor(name)
                h = named if idx is not None else hashlib.sha256()
                h.update(f"{name if idx is not None else ''}:{t.dtype}:{tuple(t.shape)}".encode())
                h.update(t.contiguous().reshape(-1).view(torch.uint8).numpy())
                if idx is None:
                    unnamed.append(h.hexdigest())
    for d in sorted(set(unnamed)):  # a tied pair stored twice counts once
        named.update(d.encode())
    return named.hexdigest()[:16]


def stats_path(model_dir: Path, layer: int, texts: list[str], family: Family) -> Path:
    """Cache file of the statistics of (the weights before ``layer``'s ``mlp_out``, layer, corpus):
    :func:`key_inputs_digest`."""
    corpus = hashlib.sha256("\n".join(texts).encode()).hexdigest()[:16]
    return cache_root() / "stats" / f"{key_inputs_digest(model_dir, family, layer)}_L{layer}_{corpus}.safetensors"


def stats_metadata(path: Path) -> dict:
    """The provenance written beside a cached C: ``source`` (dict), ``n_tokens``, ``n_texts``,
    ``layer``, ``corpus_sha256``, ``seconds``. {} for a file written before metadata existed."""
    with safe_open(str(path), framework="pt") as fh:
        meta = fh.metadata() or {}
    if "mobiedit" not in meta:
        return {}
    try:
        out = json.loads(meta["mobiedit"])
    except ValueError:
        return {}
    return out if isinstance(out, dict) else {}


def _read_cached(path: Path) -> torch.Tensor | None:
    """The cached C at ``path``, or None (logged) when the file cannot stand for it: no provenance
    metadata, damaged (truncated, not safetensors, no ``mom2``), not square, or not finite — the
    caller then recomputes and overwrites it (a cache is never a reason to stop an edit)."""
    try:
        if not stats_metadata(path):
            log.info("cached key statistics %s have no provenance metadata; recomputing", path.name)
            return None
        c = load_file(path)["mom2"]
    except (SafetensorError, KeyError, OSError, ValueError) as e:
        log.warning("cached key statistics %s are unreadable (%s); recomputing", path.name,
                    one_line(e) or type(e).__name__)
        return None
    if c.ndim != 2 or c.shape[0] != c.shape[1] or not bool(torch.isfinite(c).all()):
        log.warning("cached key statistics %s are not a finite square matrix (shape %s); recomputing",
                    path.name, tuple(c.shape))
        return None
    return c


def cached_second_moment(model, family: Family, layer: int, tok, texts: list[str], model_dir: Path,
                         progress: bool = False, source: dict | None = None) -> torch.Tensor:
    """:func:`second_moment`, read from / written to the cache (with its provenance metadata;
    ``source`` names the corpus: name, version, licence — see :func:`stats_metadata`)."""
    path = stats_path(model_dir, layer, texts, family)
    if path.is_file():
        cached = _read_cached(path)
        if cached is not None:
            return cached
    t0 = time.perf_counter()
    c, n = second_moment_counted(model, family, layer, tok, texts, progress=progress)
    meta = {"source": source or {}, "n_tokens": n, "n_texts": len(texts), "layer": layer,
            "corpus_sha256": hashlib.sha256("\n".join(texts).encode()).hexdigest(),
            "seconds": round(time.perf_counter() - t0, 3)}
    with atomic_path(path, suffix=".safetensors") as tmp:
        save_file({"mom2": c.contiguous()}, tmp, metadata={"mobiedit": json.dumps(meta, sort_keys=True)})
    log.info("key statistics of layer %d from %d tokens (%d texts) in %.1f s; cached at %s",
             layer, n, len(texts), meta["seconds"], path)
    return c
