"""Hostile-input fuzz targets (issue 19): manifests, journal lines and model configs built to break
the readers — integers of 5 001 digits, 200 000-deep nesting, duplicate keys, ``NaN``, huge and
negative dimensions, wrong types, missing sections — registered in
:data:`tools.reliability.fuzz.TARGETS` as ``bundle.manifest_hostile``, ``journal.hostile`` and
``model.config``.

Every input must end in the reader's named error (``BundleError`` / ``JournalError`` /
``ModelLoadError`` with a location) or be accepted; an accepted manifest must be usable by what a
host derives from it (edit shapes, objective, KV-cache shape, bounded buffers), an accepted
config must agree with the weights' header. The raw-text mutations (huge numbers, deep nesting,
duplicate keys) are spliced into otherwise valid JSON so that they reach the parser at every depth.
"""
from __future__ import annotations

import copy
import hashlib
import json
import struct
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

HUGE_INT = "9" * 5001                 # past Python's 4 300-digit int parsing limit
DEEP = 200_000                        # past the JSON decoder's recursion limit
HOSTILE_VALUES = [10**12, -1, 0, 2**63, 1 << 40, 1.5, float("nan"), float("inf"), "abc", "", None, True,
                  [], {}, [1, 2], {"a": 1}, "x" * 10_000, 10**100]


def _splice(draw, text: str) -> tuple[str, str]:
    """``text`` (valid JSON) with one raw hostile construct put in place of a number / value."""
    kind = draw(st.sampled_from(["huge_int", "deep", "dup_key", "nan_token", "neg_huge", "truncate"]), label="raw")
    spots = [i for i, c in enumerate(text) if c in ":["] or [0]
    at = draw(st.sampled_from(spots), label="at") + 1
    end = at
    while end < len(text) and text[end] not in ",}]":
        end += 1
    if kind == "huge_int":
        return text[:at] + " " + HUGE_INT + text[end:], "5001-digit integer"
    if kind == "neg_huge":
        return text[:at] + " -" + HUGE_INT[:4400] + text[end:], "-4400-digit integer"
    if kind == "deep":
        return text[:at] + " " + "[" * DEEP + "]" * DEEP + text[end:], f"{DEEP}-deep nesting"
    if kind == "nan_token":
        return text[:at] + " NaN" + text[end:], "NaN literal"
    if kind == "truncate":
        cut = draw(st.integers(0, max(0, len(text) - 1)), label="cut")
        return text[:cut], f"truncated at {cut}"
    brace = text.find("{", 1)
    if brace < 0:
        return text, "no object"
    key = draw(st.sampled_from(["slots", "dims", "id", "d_out", "num_hidden_layers", "files", "x"]), label="dup")
    return text[:brace + 1] + f'"{key}": 1, "{key}": 2, ' + text[brace + 1:], f"duplicate key {key}"


def _paths(obj: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix] if prefix else []
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _paths(v, prefix + (k,))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            out += _paths(v, prefix + (i,))
    return out


def _mutate_tree(draw, obj: dict) -> str:
    """Replace / delete one value anywhere in ``obj`` (in place); returns a description."""
    path = draw(st.sampled_from(_paths(obj)), label="path")
    parent = obj
    for k in path[:-1]:
        parent = parent[k]
    if isinstance(parent, dict) and draw(st.integers(0, 3), label="delete?") == 0:
        del parent[path[-1]]
        return f"delete {'.'.join(map(str, path))}"
    value = copy.deepcopy(draw(st.sampled_from(HOSTILE_VALUES), label="value"))  # never share the pool's lists
    parent[path[-1]] = value
    return f"{'.'.join(map(str, path))}={json.dumps(value)[:40]}"


# ----------------------------------------------------------------------------- manifest

def valid_manifest(folder: Path) -> dict:
    """A complete manifest that ``read_manifest`` + ``verify_files`` accept, with its one file."""
    from mobiedit.export.bundle import FORMAT_VERSION
    from mobiedit.export.recipe import shipped_recipe

    blob = b"program bytes"
    (folder / "model.pte").write_bytes(blob)
    io = {"inputs": ["tokens", "start", "slot_u", "slot_w"], "outputs": ["logits"]}
    return {"format_version": FORMAT_VERSION, "created_by": "mobiedit test", "runtime": "executorch",
            "model_family": "llama", "quantization": "fp32", "edit_quantization": "fp32", "edit_layer": 1,
            "edit_module": "model.layers.1.mlp.down_proj",
            "dims": {"vocab_size": 32, "hidden_size": 8, "intermediate_size": 16, "d_out": 8, "num_layers": 2,
                     "num_heads": 2, "num_kv_heads": 2, "head_dim": 4},
            "shapes": {"max_seq_len": 16, "prefill_chunk": 4, "edit_K": 4, "edit_rows": 3, "edit_suffix": 4,
                       "edit_prefix": 4, "edit_targets": 4, "edit_kl": 1, "edit_tokens": 8},
            "slots": 2, "special_tokens": {"bos": 1, "eos": 2, "pad": None},
            "programs": {"prefill": {"file": "model.pte", "method": "prefill", **io},
                         "edit": {"file": "model.pte", "method": "edit", "inputs": ["deltas", "mask"],
                                  "outputs": ["losses", "correct"]}},
            "edit": {"templates": ["{}", "A. {}"], "objective": {"kl_factor": 0.0625, "kl_prompt": "{} is a",
                                                                  "weight_decay": 0.5, "clamp_norm_factor": 4.0},
                     "mom2": True, "ridge": 1e-4, "weight_out_in": True},
            "chat": None, "checks": {"export_seconds": 1.0}, "recipe": shipped_recipe(4).as_manifest(),
            "files": {"model.pte": {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}}}


def _manifest_usable(m: dict) -> str | None:
    """What a host derives from an accepted manifest must work and stay bounded."""
    from mobiedit.export.generate import CacheShape
    from mobiedit.export.manifest_check import MAX_ELEMENTS
    from mobiedit.export.verify import edit_shapes_of
    from mobiedit.export.recipe import recipe_of
    from mobiedit.editing.config import ObjectiveConfig

    try:
        edit_shapes_of(m)
        recipe_of(m)
        ObjectiveConfig(**m["edit"]["objective"])
        d = m["dims"]
        shape = CacheShape(d["num_layers"], d["num_kv_heads"], m["shapes"]["max_seq_len"], d["head_dim"],
                           m["shapes"]["prefill_chunk"])
        for role, spec in m["programs"].items():
            assert spec["file"] in m["files"] and isinstance(spec["inputs"], list), role
    except Exception as e:  # noqa: BLE001 - any failure here is an accepted-but-unusable manifest
        return f"accepted manifest is unusable: {type(e).__name__}: {e}"[:300]
    n = 2 * shape.num_layers * shape.num_kv_heads * shape.max_seq_len * shape.head_dim
    return f"KV cache of {n} elements" if n > MAX_ELEMENTS else None


def manifest_hostile_case(data, work: Path):
    from mobiedit.errors import BundleError
    from mobiedit.export.bundle import read_manifest, verify_files

    from .fuzz_core import Case

    folder = work / "bundle"
    folder.mkdir()
    m = valid_manifest(folder)
    descs = [_mutate_tree(data.draw, m) for _ in range(data.draw(st.integers(0, 2), label="n tree"))]
    text = json.dumps(m)
    if data.draw(st.booleans(), label="raw?"):
        text, d = _splice(data.draw, text)
        descs.append(d)
    (folder / "manifest.json").write_text(text, encoding="utf-8")

    def call():
        man = read_manifest(folder)
        verify_files(folder, man)
        return man

    return Case(call, (BundleError,), f"manifest {'; '.join(descs) or 'valid'}"[:300], check=_manifest_usable)


# ----------------------------------------------------------------------------- journal lines

def journal_hostile_case(data, work: Path):
    import shutil

    from mobiedit.errors import JournalError
    from mobiedit.journal import Journal

    from .fuzz_core import Case
    from .fuzz_journal import template_journal

    folder = work / "j"
    shutil.copytree(template_journal(), folder)
    path = folder / "journal.jsonl"
    lines = path.read_text().splitlines()
    i = data.draw(st.integers(0, len(lines) - 1), label="line")
    obj = json.loads(lines[i])
    descs = [_mutate_tree(data.draw, obj) for _ in range(data.draw(st.integers(0, 2), label="n tree"))]
    line = json.dumps(obj, sort_keys=True)
    if data.draw(st.booleans(), label="raw?"):
        line, d = _splice(data.draw, line)
        descs.append(d)
    lines[i] = line.replace("\n", " ")
    path.write_text("\n".join(lines) + "\n")

    def call():
        j = Journal.open(folder)
        for e in j.entries():
            j.load_factors(e)
        for module in {e.module for e in j.entries()}:
            j.rebuild(module)
        return j

    return Case(call, (JournalError,), f"journal line {i + 1}: {'; '.join(descs) or 'valid'}"[:300])


# ----------------------------------------------------------------------------- model config

TINY_SHAPES = {"model.embed_tokens.weight": [32, 8], "lm_head.weight": [32, 8], "model.norm.weight": [8]}
for _l in range(2):
    TINY_SHAPES.update({f"model.layers.{_l}.mlp.down_proj.weight": [8, 16],
                        f"model.layers.{_l}.mlp.up_proj.weight": [16, 8],
                        f"model.layers.{_l}.self_attn.q_proj.weight": [8, 8],
                        f"model.layers.{_l}.self_attn.k_proj.weight": [4, 8]})
TINY_CONFIG = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 8, "intermediate_size": 16,
               "vocab_size": 32, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 4,
               "max_position_embeddings": 64}


def _header_only_safetensors(shapes: dict[str, list[int]]) -> bytes:
    """A safetensors header (and no data: only the header is read before a module is built)."""
    header, off = {}, 0
    for name, shape in shapes.items():
        n = 4
        for d in shape:
            n *= d
        header[name] = {"dtype": "F32", "shape": shape, "data_offsets": [off, off + n]}
        off += n
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw


def config_case(data, work: Path):
    from mobiedit.errors import ModelLoadError
    from mobiedit.families import family_for
    from mobiedit.models import read_config
    from mobiedit.weights_check import check_config_against_weights, check_regular_files

    from .fuzz_core import Case

    cfg = copy.deepcopy(TINY_CONFIG)
    descs = [_mutate_tree(data.draw, cfg) for _ in range(data.draw(st.integers(0, 2), label="n tree"))]
    for _ in range(data.draw(st.integers(0, 1), label="n dims")):
        key = data.draw(st.sampled_from(sorted(TINY_CONFIG)), label="dim")
        cfg[key] = data.draw(st.sampled_from([10_000_000, 3, 1, 64, 4, 2**31, 0]), label="size")
        descs.append(f"{key}={cfg[key]}")
    text = json.dumps(cfg)
    if data.draw(st.booleans(), label="raw?"):
        text, d = _splice(data.draw, text)
        descs.append(d)
    (work / "config.json").write_text(text, encoding="utf-8")
    blob = _header_only_safetensors(TINY_SHAPES)
    if data.draw(st.integers(0, 9), label="bad header?") == 0:
        blob = data.draw(st.sampled_from([b"", b"\xff" * 8, struct.pack("<Q", 1 << 60) + b"{}",
                                          struct.pack("<Q", 5) + b"[1,2]", blob[:20]]), label="header")
        descs.append("damaged header")
    (work / "model.safetensors").write_bytes(blob)

    def call():
        check_regular_files(work)
        c = read_config(work)
        fam = family_for(str(c.get("model_type", "")))
        check_config_against_weights(work, c, fam)
        return c

    def agrees(c: dict) -> str | None:
        for key in ("num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size"):
            if c.get(key) is not None and c[key] != TINY_CONFIG[key]:
                return f"accepted {key}={c[key]!r} against weights of {TINY_CONFIG[key]}"
        return None

    return Case(call, (ModelLoadError,), f"config {'; '.join(descs) or 'valid'}"[:300], check=agrees)
