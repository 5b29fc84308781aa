"""Section-by-section validation of a bundle manifest, with bounds (docs/bundle_format.md).

:func:`~mobiedit.export.bundle.read_manifest` checks the top level (version, runtime, required
fields, file names) and then calls :func:`validate_sections`, which checks every field a host
reads, so that nothing later fails with ``KeyError`` / ``TypeError`` or allocates without bound:

* ``dims`` / ``shapes`` / ``slots``: integers in a range, and the buffers a host allocates from
  them (slots, KV cache, the unpacked key statistics) bounded in total elements;
* ``programs.<role>``: ``file`` listed, ``method`` a name or null, ``inputs`` / ``outputs`` lists
  of names;
* ``special_tokens``: ids in ``[0, vocab_size)`` or null; ``edit``: templates with a ``{}`` slot,
  a known objective, booleans, a finite ridge and (optional) the write rule ``update``; ``files``: sha256 hex and sizes; ``chat``;
* ``recipe`` (optional: bundles exported before it was written have none): the edit recipe,
  checked by :func:`mobiedit.export.recipe.check_recipe`.

Every problem is a :class:`~mobiedit.errors.BundleError` naming ``manifest.json, field 'x.y'``.
"""
from __future__ import annotations

import dataclasses
import math
import re
from typing import NamedTuple

from mobiedit.errors import BundleError

MAX_MANIFEST_BYTES = 16 << 20
MAX_WIDTH = 1 << 17        # hidden / intermediate / d_out / head_dim
MAX_VOCAB = 1 << 22
MAX_LAYERS = 1 << 10       # num_layers, heads
MAX_SHAPE = 1 << 16        # sequence lengths and edit-program sizes
MAX_SLOTS = 1 << 12
MAX_ELEMENTS = 1 << 28     # any one buffer a host allocates from the manifest (1 GiB of float32)
MAX_FILE_BYTES = 1 << 40
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.]{0,127}")
_MODULE = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+){0,15}")
_HEX64 = re.compile(r"[0-9a-f]{64}")
FIX = "re-export the bundle"

DIMS = {"d_out": MAX_WIDTH, "intermediate_size": MAX_WIDTH, "hidden_size": MAX_WIDTH, "head_dim": MAX_WIDTH,
        "num_layers": MAX_LAYERS, "num_kv_heads": MAX_LAYERS}
OPTIONAL_DIMS = {"vocab_size": MAX_VOCAB, "num_heads": MAX_LAYERS}
SHAPES = ("max_seq_len", "prefill_chunk", "edit_K", "edit_rows", "edit_suffix", "edit_prefix", "edit_targets",
          "edit_kl")


def _fail(where: str, field: str, msg: str) -> None:
    raise BundleError(msg[:300], where=f"{where}, field '{field}'", fix=FIX)


def _int(where: str, field: str, value, lo: int, hi: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        _fail(where, field, f"must be an integer, got {type(value).__name__}")
    if not lo <= value <= hi:
        _fail(where, field, f"must be in [{lo}, {hi}], got {value if abs(value) < 10**30 else 'a huge number'}")
    return value


def _obj(where: str, field: str, value) -> dict:
    if not isinstance(value, dict):
        _fail(where, field, f"must be a JSON object, got {type(value).__name__}")
    return value


def _names(where: str, field: str, value, max_len: int = 64) -> None:
    if not isinstance(value, list) or not 0 < len(value) <= max_len:
        _fail(where, field, f"must be a list of 1..{max_len} names")
    for i, n in enumerate(value):
        if not isinstance(n, str) or not _NAME.fullmatch(n):
            _fail(where, f"{field}[{i}]", f"invalid name {str(n)[:40]!r}")
    if len(set(value)) != len(value):
        _fail(where, field, "names repeat")


def _dims(m: dict, where: str) -> dict:
    dims = _obj(where, "dims", m["dims"])
    for key, hi in DIMS.items():
        if key not in dims:
            _fail(where, f"dims.{key}", "missing field")
        _int(where, f"dims.{key}", dims[key], 1, hi)
    for key, hi in OPTIONAL_DIMS.items():
        if key in dims:
            _int(where, f"dims.{key}", dims[key], 1, hi)
    if m["edit_layer"] >= dims["num_layers"]:
        _fail(where, "edit_layer", f"{m['edit_layer']} is not a layer of a {dims['num_layers']}-layer model")
    return dims


def _shapes(m: dict, dims: dict, where: str) -> None:
    shapes = _obj(where, "shapes", m["shapes"])
    for key in SHAPES:
        if key not in shapes:
            _fail(where, f"shapes.{key}", "missing field")
        _int(where, f"shapes.{key}", shapes[key], 0 if key == "edit_kl" else 1, MAX_SHAPE)
    if "edit_tokens" in shapes and shapes["edit_tokens"] != shapes["edit_prefix"] + shapes["edit_suffix"]:
        _fail(where, "shapes.edit_tokens", "must equal edit_prefix + edit_suffix")
    if shapes["edit_kl"] >= shapes["edit_rows"]:
        _fail(where, "shapes.edit_kl", "must be < edit_rows")
    slots = _int(where, "slots", m["slots"], 1, MAX_SLOTS)
    tokens = shapes["edit_prefix"] + shapes["edit_suffix"]  # = edit_tokens (checked above)
    sizes = {"slots": slots * max(dims["d_out"], dims["intermediate_size"]),
             "shapes.max_seq_len": 2 * dims["num_layers"] * dims["num_kv_heads"] * shapes["max_seq_len"]
             * dims["head_dim"],
             "dims.intermediate_size": dims["intermediate_size"] ** 2,
             "shapes.edit_rows": shapes["edit_rows"] * tokens * dims["hidden_size"] * 2 * dims["num_layers"]}
    for field, n in sizes.items():
        if n > MAX_ELEMENTS:
            _fail(where, field, f"implies a buffer of {n} elements (limit {MAX_ELEMENTS})")


def _programs(m: dict, where: str) -> None:
    for role, spec in m["programs"].items():
        if not isinstance(role, str) or not _NAME.fullmatch(role):
            _fail(where, "programs", f"invalid program role {str(role)[:40]!r}")
        spec = _obj(where, f"programs.{role}", spec)
        method = spec.get("method")
        if method is not None and (not isinstance(method, str) or not _NAME.fullmatch(method)):
            _fail(where, f"programs.{role}.method", "must be a method name or null")
        for key in ("inputs", "outputs"):
            if key not in spec:
                _fail(where, f"programs.{role}.{key}", "missing field")
            _names(where, f"programs.{role}.{key}", spec[key])


def _special(m: dict, dims: dict, where: str) -> None:
    special = _obj(where, "special_tokens", m["special_tokens"])
    vocab = dims.get("vocab_size", MAX_VOCAB)
    for key, value in special.items():
        if not isinstance(key, str) or not _NAME.fullmatch(key):
            _fail(where, "special_tokens", f"invalid key {str(key)[:40]!r}")
        if value is not None:
            _int(where, f"special_tokens.{key}", value, 0, vocab - 1)


def _edit(m: dict, where: str) -> None:
    from mobiedit.editing.config import ObjectiveConfig

    edit = _obj(where, "edit", m["edit"])
    t = edit.get("templates")
    if not isinstance(t, list) or not 0 < len(t) <= 1024:
        _fail(where, "edit.templates", "must be a list of 1..1024 templates")
    for i, x in enumerate(t):
        if not isinstance(x, str) or "{}" not in x or len(x) > 4096:
            _fail(where, f"edit.templates[{i}]", "must be text (at most 4096 characters) with a {} slot")
    obj = _obj(where, "edit.objective", edit.get("objective"))
    known = {f.name: f.type for f in dataclasses.fields(ObjectiveConfig)}
    for key, value in obj.items():
        if key not in known:
            _fail(where, f"edit.objective.{key}"[:80], "unknown field")
        want_str = key == "kl_prompt"
        ok = isinstance(value, str) and len(value) <= 4096 if want_str else (
            isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value))
        if not ok:
            _fail(where, f"edit.objective.{key}", "must be " + ("text" if want_str else "a finite number"))
    try:
        ObjectiveConfig(**obj)
    except Exception as e:  # noqa: BLE001 - ConfigError for out-of-range values
        _fail(where, "edit.objective", f"invalid objective ({e})")
    for key in ("mom2", "weight_out_in"):
        if key in edit and not isinstance(edit[key], bool):
            _fail(where, f"edit.{key}", "must be true or false")
    ridge = edit.get("ridge", 0.0)
    if not isinstance(ridge, (int, float)) or isinstance(ridge, bool) or not math.isfinite(ridge) or ridge < 0:
        _fail(where, "edit.ridge", "must be a finite number >= 0")
    if "update" in edit:  # optional: bundles exported before session 28 write ROME's direction
        from mobiedit.editing.config import check_edited_weight, check_rows_ridge
        from mobiedit.editing.update import BUNDLE_UPDATE_RULES
        from mobiedit.errors import ConfigError

        upd = _obj(where, "edit.update", edit["update"])
        for key in upd:
            if key not in ("rule", "rows_ridge", "edited_weight"):
                _fail(where, f"edit.update.{str(key)[:40]}", "unknown field")
        if upd.get("rule", "rome") not in BUNDLE_UPDATE_RULES:
            _fail(where, "edit.update.rule", f"must be one of {', '.join(BUNDLE_UPDATE_RULES)}")
        try:
            check_rows_ridge(upd.get("rows_ridge", 1e-2), "edit.update.rows_ridge")
        except ConfigError as e:
            _fail(where, "edit.update.rows_ridge", e.message)
        try:
            check_edited_weight(upd.get("edited_weight", 1.0), "edit.update.edited_weight")
        except ConfigError as e:
            _fail(where, "edit.update.edited_weight", e.message)


def validate_sections(m: dict, where: str) -> None:
    """Check every section of a manifest whose top level :func:`read_manifest` accepted."""
    if not isinstance(m["model_family"], str) or not _NAME.fullmatch(m["model_family"]):
        _fail(where, "model_family", "must be a family name such as 'llama'")
    if not isinstance(m["edit_module"], str) or not _MODULE.fullmatch(m["edit_module"]):
        _fail(where, "edit_module", "must be a dotted module path such as model.layers.1.mlp.down_proj")
    _int(where, "edit_layer", m["edit_layer"], 0, MAX_LAYERS - 1)
    for key in ("quantization", "edit_quantization", "created_by"):
        if key in m and not (isinstance(m[key], str) and len(m[key]) <= 200):
            _fail(where, key, "must be text")
    dims = _dims(m, where)
    _shapes(m, dims, where)
    _programs(m, where)
    _special(m, dims, where)
    _edit(m, where)
    for name, meta in m["files"].items():
        if not _HEX64.fullmatch(meta["sha256"]):
            _fail(where, f"files.{name}.sha256"[:120], "must be 64 lowercase hex digits")
        _int(where, f"files.{name}.bytes"[:120], meta["bytes"], 0, MAX_FILE_BYTES)
    chat = m.get("chat")
    if chat is not None:
        chat = _obj(where, "chat", chat)
        if not isinstance(chat.get("template_file"), str) or chat["template_file"] not in m["files"]:
            _fail(where, "chat.template_file", "must name a file listed in files")
        if not isinstance(chat.get("default"), bool):
            _fail(where, "chat.default", "must be true or false")
    if "checks" in m and not isinstance(m["checks"], dict):
        _fail(where, "checks", "must be a JSON object")
    if "recipe" in m:
        from .recipe import check_recipe

        zo = check_recipe(m["recipe"], where).zo
        if zo.K * dims["d_out"] > MAX_ELEMENTS:  # the search's directions, K rows of d_out floats
            _fail(where, "recipe.zo.n_dirs", f"implies a buffer of {zo.K} x {dims['d_out']} elements "
                  f"(limit {MAX_ELEMENTS}); use fewer directions")


class BundleUpdate(NamedTuple):
    """A manifest's ``edit.update``: the write rule, the ``rows`` ridge and, for the protecting
    rules, the weight of the applied edits' keys (:func:`mobiedit.editing.update.bundle_direction`)."""

    rule: str
    rows_ridge: float
    edited_weight: float


def update_of(manifest: dict) -> BundleUpdate:
    """The write rule of a manifest :func:`read_manifest` accepted: ``edit.update``'s ``rule``,
    ``rows_ridge`` and ``edited_weight`` (absent in bundles exported before session 28: ROME's
    direction; ``edited_weight`` before session 34: 1)."""
    u = manifest["edit"].get("update") or {}
    return BundleUpdate(u.get("rule", "rome"), float(u.get("rows_ridge", 1e-2)), float(u.get("edited_weight", 1.0)))
