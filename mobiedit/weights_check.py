"""Checks of a model folder that run before any module is built (:func:`mobiedit.models.load_model`).

* :func:`check_regular_files` — every file a loader may open (``*.json``, ``*.safetensors``,
  tokenizer files) must be a regular file (a symlink to one is fine): a FIFO would block the
  reader forever, ``/dev/zero`` would be read without end. Refused with "not a regular file".
* :func:`weight_shapes` — tensor names and shapes from the safetensors *headers* only (8-byte
  length + JSON; bounded, no tensor data read, duplicate keys refused).
* :func:`check_config_against_weights` — ``config.json``'s sizes (layers, width, MLP width,
  vocabulary, heads, positions) against those shapes. transformers builds the module from the
  config *before* it looks at the weights, so ``num_hidden_layers: 10000000`` used to run for
  minutes and take gigabytes before failing; here it fails in milliseconds with bounded memory.
"""
from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from .errors import ModelLoadError
from .families import Family
from .jsonio import JSONProblem, loads_strict

MAX_HEADER = 100 << 20  # safetensors' own limit for the JSON header
_READ_SUFFIXES = (".json", ".safetensors", ".txt", ".model", ".jinja", ".tiktoken")
#: config fields that size the module, with an upper bound no real checkpoint reaches
BOUNDS = {"num_hidden_layers": 4096, "n_layer": 4096, "hidden_size": 1 << 17, "n_embd": 1 << 17,
          "intermediate_size": 1 << 19, "n_inner": 1 << 19, "vocab_size": 1 << 23, "num_attention_heads": 4096,
          "n_head": 4096, "num_key_value_heads": 4096, "head_dim": 1 << 14, "max_position_embeddings": 1 << 22,
          "n_positions": 1 << 22, "n_ctx": 1 << 22}
FIX = "use the config.json that belongs to these weights (incomplete, mixed or hand-edited checkpoint?)"


def check_regular_files(folder: Path) -> None:
    """Refuse a folder whose loadable files include a FIFO, device, socket or folder."""
    for p in sorted(folder.iterdir()):
        if not p.name.endswith(_READ_SUFFIXES):
            continue
        try:
            mode = os.stat(p).st_mode
        except OSError as e:
            raise ModelLoadError(f"cannot read ({e.strerror})", where=str(p),
                                 fix="fix or remove the file (a dangling symbolic link?)") from None
        if stat.S_ISDIR(mode) and not p.name.endswith((".json", ".safetensors")):
            continue
        if not stat.S_ISREG(mode):
            kind = ("a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
                    else "a folder" if stat.S_ISDIR(mode) else "a socket" if stat.S_ISSOCK(mode) else "special")
            raise ModelLoadError(f"not a regular file ({kind}" + (", through a symbolic link" if p.is_symlink() else "")
                                 + ")", where=str(p), fix="replace it with the real file from the checkpoint")


def _header(path: Path) -> dict:
    """The parsed JSON header of one safetensors file (ModelLoadError when malformed)."""
    where = str(path)
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise ModelLoadError("not a regular file", where=where, fix="replace it with the real weights file")
        head = os.pread(fd, 8, 0)
        n = int.from_bytes(head, "little") if len(head) == 8 else -1
        if not 2 <= n <= min(MAX_HEADER, st.st_size - 8):
            raise ModelLoadError(f"not a safetensors file (header length {n}, file size {st.st_size})", where=where,
                                 fix="restore the weights file (truncated or not safetensors)")
        raw = os.pread(fd, n, 8)
    finally:
        os.close(fd)
    try:
        header = loads_strict(raw.decode("utf-8"))
    except (UnicodeDecodeError, JSONProblem) as e:
        raise ModelLoadError(f"safetensors header is not valid JSON ({' '.join(str(e).split())[:150]})", where=where,
                             fix="restore the weights file") from None
    if not isinstance(header, dict):
        raise ModelLoadError("safetensors header is not a JSON object", where=where, fix="restore the weights file")
    return header


def weight_shapes(folder: Path) -> dict[str, tuple[int, ...]]:
    """{tensor name: shape} over every top-level ``*.safetensors`` file, from the headers only."""
    shapes: dict[str, tuple[int, ...]] = {}
    for path in sorted(folder.glob("*.safetensors")):
        for name, meta in _header(path).items():
            if name == "__metadata__":
                continue
            shape = meta.get("shape") if isinstance(meta, dict) else None
            if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                      for d in shape):
                raise ModelLoadError(f"tensor {name[:80]!r} has no valid shape", where=str(path),
                                     fix="restore the weights file")
            shapes[name] = tuple(shape)
    return shapes


def _int_field(cfg: dict, key: str, where: str) -> int | None:
    value = cfg.get(key)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= BOUNDS[key]:
        shown = value if isinstance(value, (int, float)) and abs(value) < 10**30 else type(value).__name__
        raise ModelLoadError(f"invalid value {shown!r} (an integer in [1, {BOUNDS[key]}])",
                             where=f"{where}, field '{key}'", fix=FIX)
    return value


def _mismatch(where: str, key: str, value: int, tensor: str, shape: tuple, expect: str) -> ModelLoadError:
    return ModelLoadError(f"{key} = {value}, but the weights' {tensor} has shape {list(shape)} ({expect})",
                          where=f"{where}, field '{key}'", fix=FIX)


def _layer_indices(shapes: dict, family: Family) -> set[int]:
    pat = re.compile(re.escape(family.layer.split("{}")[0]) + r"(\d+)\.")
    return {int(m.group(1)) for m in (pat.match(n) for n in shapes) if m}


def check_config_against_weights(folder: Path, cfg: dict, family: Family) -> None:
    """Refuse a ``config.json`` whose sizes disagree with the weights' headers (see module docstring)."""
    where = str(folder / "config.json")
    vals = {k: _int_field(cfg, k, where) for k in BOUNDS}
    shapes = weight_shapes(folder)
    n_layers, hidden = vals.get(family.n_layers_attr), vals.get(family.hidden_attr)
    if n_layers is not None:
        idx = _layer_indices(shapes, family)
        if idx and idx != set(range(n_layers)):
            raise ModelLoadError(f"{family.n_layers_attr} = {n_layers}, but the weights hold layers "
                                 f"{min(idx)}..{max(idx)} ({len(idx)} layers)",
                                 where=f"{where}, field '{family.n_layers_attr}'", fix=FIX)
        if not idx and n_layers > len(shapes):
            raise ModelLoadError(f"{family.n_layers_attr} = {n_layers}, but the weights hold only "
                                 f"{len(shapes)} tensors",
                                 where=f"{where}, field '{family.n_layers_attr}'", fix=FIX)
    emb = shapes.get(family.embed + ".weight")
    if emb is not None and len(emb) == 2:
        if hidden is not None and emb[1] != hidden:
            raise _mismatch(where, family.hidden_attr, hidden, family.embed + ".weight", emb, "[vocab, hidden]")
        if vals["vocab_size"] is not None and emb[0] != vals["vocab_size"]:
            raise _mismatch(where, "vocab_size", vals["vocab_size"], family.embed + ".weight", emb, "[vocab, hidden]")
    name = family.mlp_out.format(0) + ".weight"
    w = shapes.get(name)
    inner = vals["intermediate_size"] or vals["n_inner"] or (4 * hidden if family.name == "gpt2" and hidden else None)
    if w is not None and len(w) == 2:
        out_dim, in_dim = w if family.weight_out_in else w[::-1]
        if hidden is not None and out_dim != hidden:
            raise _mismatch(where, family.hidden_attr, hidden, name, w, "the MLP writes the hidden state")
        key = "intermediate_size" if vals["intermediate_size"] else "n_inner"
        if inner is not None and in_dim != inner:
            raise _mismatch(where, key, inner, name, w, "the MLP's input width")
    _check_heads(shapes, vals, family, hidden, where)
    wpe = shapes.get("transformer.wpe.weight")
    if family.name == "gpt2" and wpe is not None and vals["n_positions"] is not None and wpe[0] != vals["n_positions"]:
        raise _mismatch(where, "n_positions", vals["n_positions"], "transformer.wpe.weight", wpe, "[positions, hidden]")


def _check_heads(shapes: dict, vals: dict, family: Family, hidden: int | None, where: str) -> None:
    heads = vals["num_attention_heads"] or vals["n_head"]
    if heads is None or hidden is None:
        return
    key = "num_attention_heads" if vals["num_attention_heads"] else "n_head"
    head_dim = vals["head_dim"] or (hidden // heads if hidden % heads == 0 else None)
    if head_dim is None:
        raise ModelLoadError(f"{key} = {heads} does not divide the hidden size {hidden}",
                             where=f"{where}, field '{key}'", fix=FIX)
    kv = vals["num_key_value_heads"] or heads
    if heads % kv:
        raise ModelLoadError(f"num_key_value_heads = {kv} does not divide {key} = {heads}",
                             where=f"{where}, field 'num_key_value_heads'", fix=FIX)
    prefix = family.layer.format(0)
    for proj, n, k in (("q_proj", heads, key), ("k_proj", kv, "num_key_value_heads" if vals["num_key_value_heads"]
                                                else key)):
        w = shapes.get(f"{prefix}.self_attn.{proj}.weight")
        if w is not None and len(w) == 2 and w[0] != n * head_dim:
            raise _mismatch(where, k, n, f"{prefix}.self_attn.{proj}.weight", w, f"{n} heads x head_dim {head_dim}")
