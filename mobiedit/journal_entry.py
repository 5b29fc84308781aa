"""The journal's on-disk entry format: parsing and validation of one entry, no I/O.

One line of ``journal.jsonl`` is a :class:`JournalEntry`; :func:`entry_from_json` validates a
parsed line (every problem a JournalError naming the field), :func:`factors_name` is the only
file name an entry may reference, :func:`tensor_sha256` is the bit-exact identity stored as
``base_sha256``, and :func:`record_args` checks the arguments of
:meth:`mobiedit.journal.Journal.record` before anything is written. Reading and writing the
journal folder is :mod:`mobiedit.journal`, which imports these (and re-exports
:class:`JournalEntry`, :func:`factors_name` and :func:`tensor_sha256`).
"""
from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, fields
from typing import Any

import torch

from .errors import JournalError, NumericalError
from .families import FAMILIES, Family
from .request_record import EditRequest

VERSION = 1
STATUSES = ("applied", "undone")
RESTORE = "restore the journal folder from a backup"
MAX_ID = 10**12  # bounds of journal numbers (exact in a double, so the app's reader agrees)
MAX_DIM = 1 << 24


def factors_name(edit_id: int) -> str:
    """File name of an edit's factors; the only names a journal entry may reference."""
    return f"edit-{edit_id:06d}.safetensors"


@dataclass(frozen=True)
class JournalEntry:
    """One journal line. ``d_out``/``d_in`` are the module's output/input sizes (len of u / w);
    ``base_sha256`` is :func:`tensor_sha256` of the module's base weight."""

    id: int
    request: dict
    method: str
    module: str
    layer: int
    family: str
    weight_out_in: bool
    d_out: int
    d_in: int
    factors: str
    sha256: str
    base_sha256: str
    status: str
    timestamp: str
    metrics: dict | None = None
    config: dict | None = None
    version: int = VERSION

    @property
    def active(self) -> bool:
        return self.status == "applied"

    def edit_request(self) -> EditRequest:
        """The stored request as an :class:`EditRequest` (RequestError if it was a free dict)."""
        return EditRequest.from_dict(self.request)


_OPTIONAL = {"metrics", "config"}
_HEX64 = re.compile(r"[0-9a-f]{64}")
_MODULE = re.compile(r"[A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*")


def entry_from_json(obj: Any, where: str) -> JournalEntry:
    """Validate one parsed journal line; every problem is a JournalError naming the field."""
    if not isinstance(obj, dict):
        raise JournalError(f"line is a JSON {type(obj).__name__}, not an object", where=where, fix=RESTORE)
    if isinstance(obj.get("id"), int):
        where = f"{where} (edit {obj['id']})"
    kinds = {f.name: f.type for f in fields(JournalEntry)}
    py = {"int": int, "dict": dict, "str": str, "bool": bool, "dict | None": dict}
    for name, kind in kinds.items():
        value = obj.get(name)
        if name not in obj or (value is None and name not in _OPTIONAL):
            raise JournalError("missing field", where=f"{where}, field '{name}'", fix=RESTORE)
        if value is not None and (not isinstance(value, py[kind])
                                  or (kind != "bool" and isinstance(value, bool))):
            raise JournalError(f"must be {kind}, got {type(value).__name__}",
                               where=f"{where}, field '{name}'", fix=RESTORE)
    extra = sorted(set(obj) - set(kinds))
    checks = [("version", obj["version"] <= VERSION, "written by a newer mobiedit; upgrade"),
              ("id", 1 <= obj["id"] <= MAX_ID, f"ids are 1 .. {MAX_ID}"),
              ("layer", 0 <= obj["layer"] <= MAX_DIM, f"layer index must be 0 .. {MAX_DIM}"),
              ("d_out", 1 <= obj["d_out"] <= MAX_DIM, f"sizes must be 1 .. {MAX_DIM}"),
              ("d_in", 1 <= obj["d_in"] <= MAX_DIM, f"sizes must be 1 .. {MAX_DIM}"),
              ("status", obj["status"] in STATUSES, f"status must be one of {STATUSES}"),
              ("factors", obj["factors"] == factors_name(obj["id"]),
               f"must be {factors_name(obj['id'])!r} (no other paths are allowed)"),
              ("sha256", bool(_HEX64.fullmatch(obj["sha256"])), "must be 64 lowercase hex digits"),
              ("base_sha256", bool(_HEX64.fullmatch(obj["base_sha256"])), "must be 64 hex digits"),
              ("module", bool(_MODULE.fullmatch(obj["module"])),
               "must be a dotted module path such as model.layers.1.mlp.down_proj"),
              (extra[0] if extra else "", not extra, "unknown field; written by a newer mobiedit?")]
    for name, ok, fix in checks:
        if not ok:
            raise JournalError(f"invalid value {obj.get(name)!r}"[:200], where=f"{where}, field '{name}'",
                               fix=fix)
    return JournalEntry(**obj)


def tensor_sha256(t: torch.Tensor) -> str:
    """sha256 over dtype, shape and raw bytes of ``t`` (bit-exact identity of a tensor)."""
    flat = t.detach().cpu().contiguous().reshape(-1)
    h = hashlib.sha256(f"{flat.dtype}{tuple(t.shape)}".encode())
    h.update(memoryview(flat.view(torch.uint8).numpy()))
    return h.hexdigest()


def _json_ready(value: Any, field: str) -> Any:
    """``value`` as it will read back from JSON (tuples → lists); NaN/Inf and objects refused."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError) as e:
        raise JournalError(f"not JSON-serialisable ({e})", where=f"record(), argument '{field}'",
                           fix="pass plain dicts of str/int/float/bool/list") from None


def record_args(request: EditRequest | dict, method: str, family: Family | str, layer: int,
                module_name: str, u: torch.Tensor, w: torch.Tensor, base_weight: torch.Tensor,
                metrics: dict | None, config: dict | None, key: torch.Tensor | None = None
                ) -> tuple[Family, int, int, dict[str, torch.Tensor], dict[str, Any]]:
    """Validate :meth:`Journal.record` arguments; returns (family, d_out, d_in, float32 CPU
    factors {u, w} and, with ``key``, {k}, JSON-ready {request, metrics, config}). Nothing is
    written here."""
    fam = FAMILIES.get(family) if isinstance(family, str) else family
    if not isinstance(fam, Family):
        raise JournalError(f"unknown family {family!r}", where="record(), argument 'family'",
                           fix=f"use one of {sorted(FAMILIES)}")
    for name, value in (("method", method), ("module_name", module_name)):
        if not isinstance(value, str) or not value.strip():
            raise JournalError(f"must be non-empty text, got {value!r}",
                               where=f"record(), argument '{name}'", fix="name the method / module")
    if not isinstance(layer, int) or isinstance(layer, bool) or layer < 0:
        raise JournalError(f"must be an int >= 0, got {layer!r}", where="record(), argument 'layer'",
                           fix="pass the layer index")
    if not isinstance(base_weight, torch.Tensor) or base_weight.dim() != 2:
        raise JournalError("must be a 2-D tensor", where="record(), argument 'base_weight'",
                           fix="pass the module's weight before this edit")
    if base_weight.is_floating_point() and not torch.isfinite(base_weight).all():
        raise NumericalError("contains NaN/Inf", where="record(), argument 'base_weight'",
                             fix="the model's weight is already non-finite; reload the original model")
    d_out, d_in = base_weight.shape if fam.weight_out_in else base_weight.shape[::-1]
    factors: dict[str, torch.Tensor] = {}
    given = (("u", "u", u, d_out), ("w", "w", w, d_in)) + ((("k", "key", key, d_in),) if key is not None else ())
    for name, arg, t, size in given:  # name in the factors file, argument of record()
        if not isinstance(t, torch.Tensor) or tuple(t.shape) != (size,):
            got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
            raise JournalError(f"must be a tensor of shape [{size}], got {got}",
                               where=f"record(), argument '{arg}'", fix="u: [d_out], w and key: [d_in]")
        factors[name] = t.detach().to(device="cpu", dtype=torch.float32).contiguous().clone()
        if not torch.isfinite(factors[name]).all():
            raise NumericalError("contains NaN/Inf", where=f"record(), argument '{arg}'",
                                 fix="the edit diverged; nothing was recorded")
    req = request.to_dict() if isinstance(request, EditRequest) else request
    if not isinstance(req, dict):
        raise JournalError(f"must be an EditRequest or dict, got {type(req).__name__}",
                           where="record(), argument 'request'", fix="pass the EditRequest")
    extras = {k: _json_ready(v, k) for k, v in (("request", req), ("metrics", metrics),
                                                 ("config", config))}
    for key in ("metrics", "config"):
        if extras[key] is not None and not isinstance(extras[key], dict):
            raise JournalError("must be a dict or None", where=f"record(), argument '{key}'",
                               fix="pass a dict of JSON values")
    return fam, int(d_out), int(d_in), factors, extras
