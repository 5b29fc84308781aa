"""Fuzz targets for every reader of untrusted input, and ``python -m tools.reliability.fuzz``.

Property checked for each generated input: the reader either accepts it (and what it returns
satisfies the reader's invariants) or raises the project's own error type — a
:class:`~mobiedit.errors.MobiEditError` subclass — whose ``where`` names the file / record /
field, on one line. Anything else (``KeyError``, ``RecursionError``, a library's own exception,
a wrong error type, an error without a location, an accepted-but-invalid result) is a *crash*.

Targets (``TARGETS``):

* ``requests.file`` — arbitrary file contents (bytes, corrupted JSON / JSON Lines, deep nesting,
  huge numbers, bad UTF-8) through :func:`~mobiedit.requests.load_requests`;
* ``requests.counterfact_rome`` / ``requests.counterfact_flat`` / ``requests.zsre`` — the three
  record loaders: a valid record with one field replaced / removed / made near-valid must be
  accepted or rejected with an error naming *that* field (or a field it is checked against); plus
  random records in any format;
* ``requests.cli`` / ``requests.from_dict`` — :func:`~mobiedit.requests.requests_from_cli`,
  :meth:`~mobiedit.requests.EditRequest.from_dict`;
* ``journal`` — a valid journal folder with its ``journal.jsonl`` text, a line's fields, its
  factors files or ``base.safetensors`` damaged (optionally with the sha256 updated, i.e. a
  consistent but hostile journal), then opened, read, rebuilt, baked into a toy model and undone;
* ``native.x0`` / ``native.losses`` / ``native.rank_one`` — the native engine's buffer inputs
  through the public entries :func:`mobiedit.zo.run_zo` (start delta, the loss buffer the forward
  callback returns) and :func:`mobiedit.zo.rank_one_factors`;
* ``native.raw`` — the raw pybind11 extension ``mobiedit._native`` (buffers, sizes, config
  fields). Its documented contract (``mobiedit/_native.pyi``) is ``TypeError`` / ``ValueError``
  for a wrong dtype / shape / layout and project errors for config and numerical faults; those
  builtin errors count as rejections when their message names the argument, and are reported
  separately (``builtin_named``).

The tests (``tests/test_fuzz_readers.py``) run every target with a small example budget; the
script runs a large one and prints the counts::

    python -m tools.reliability.fuzz --examples 10000 [--seed 0] [--json runs/fuzz.json]
"""
from __future__ import annotations

import argparse
import copy
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

try:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hyp_seed
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
except ImportError as exc:  # pragma: no cover - hypothesis is in the [test] extra
    raise ImportError("tools.reliability.fuzz needs hypothesis: pip install -e '.[test]'") from exc

from mobiedit.errors import JournalError, MobiEditError, RequestError
from .toy import D_IN, D_OUT, JOURNAL_MODULES, toy_llama

# ----------------------------------------------------------------------------- outcome classification

ACCEPTED, REJECTED, BUILTIN, CRASH = "accepted", "rejected", "builtin_named", "crash"
_FIELD = re.compile(r"field '([^']*)'")


@dataclass
class Case:
    """One generated input: ``call`` runs the reader; errors must be ``expected`` and name a
    location; ``fields`` (if given) are the field names an error may name; ``check`` validates
    an accepted result; ``builtin`` lists builtin exception types accepted when their message
    contains one of ``builtin_names`` (raw extension only)."""

    call: Callable[[], Any]
    expected: tuple[type, ...]
    desc: str
    fields: tuple[str, ...] | None = None
    check: Callable[[Any], str | None] | None = None
    builtin: tuple[type, ...] = ()
    builtin_names: tuple[str, ...] = ()


def field_of(err: MobiEditError) -> str | None:
    """The field named in an error's ``where`` (``"... field 'x.y'"``), or None."""
    m = _FIELD.search(err.where or "")
    return m.group(1) if m else None


def _field_matches(got: str, allowed: tuple[str, ...]) -> bool:
    base = got.split("[")[0]
    return any(base == a or base.startswith(a + ".") or a.startswith(base + ".") for a in allowed)


def classify(case: Case) -> tuple[str, str]:
    """Run ``case`` and return (outcome, detail). Never raises (except KeyboardInterrupt)."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = case.call()
    except KeyboardInterrupt:
        raise
    except MobiEditError as err:
        text = str(err)
        if not isinstance(err, case.expected):
            return CRASH, f"wrong error type {type(err).__name__}: {text[:300]}"
        if not err.where:
            return CRASH, f"error names no location: {text[:300]}"
        if "\n" in text:
            return CRASH, f"multi-line message: {text[:300]!r}"
        if case.fields is not None:
            got = field_of(err)
            if got is None or not _field_matches(got, case.fields):
                return CRASH, f"error names field {got!r}, expected one of {case.fields}: {text[:300]}"
        return REJECTED, f"{type(err).__name__}: {text[:200]}"
    except BaseException as err:  # noqa: BLE001 - classifying every escape is the point
        if case.builtin and isinstance(err, case.builtin) and not isinstance(err, MobiEditError):
            msg = str(err)
            if any(n in msg for n in case.builtin_names):
                return BUILTIN, f"{type(err).__name__}: {msg[:200]}"
        return CRASH, f"{type(err).__name__}: {str(err)[:300]}"
    if case.check is not None:
        problem = case.check(result)
        if problem:
            return CRASH, f"accepted an invalid result: {problem}"
    return ACCEPTED, ""


# ----------------------------------------------------------------------------- shared strategies

SPECIAL_STRINGS = ["", " ", "  \t", "{}", "{}{}", "{", "}", "{} {}", "X", "{} is", "a X b", "\x00", "\u2028",
                   "\ud800", "é", "ÉCOLE", "ß", "null", "0", "-1", "[]", "{\"a\": 1}", "x" * 300]
KEYS = ["case_id", "prompt", "subject", "target_new", "ground_truth", "rephrase_prompt", "locality_prompt",
        "locality_ground_truth", "src", "alt", "answers", "rephrase", "loc", "loc_ans", "requested_rewrite",
        "paraphrase_prompts", "neighborhood_prompts", "neighborhood_answers", "str", "id"]

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-3, 3)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(SPECIAL_STRINGS))
JSON_VALUES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), kids, max_size=5),
                           max_leaves=12)


def _dumps(obj: Any) -> str:
    """JSON text of ``obj`` (ASCII, so lone surrogates survive as escapes; NaN allowed)."""
    return json.dumps(obj, ensure_ascii=True)


# ----------------------------------------------------------------------------- request loaders

def _valid_records() -> dict[str, list[dict]]:
    """A few valid raw records of each format, from the bundled data."""
    from mobiedit.requests import bundled_path, load_requests, to_rome_record

    flat = json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:6]
    zsre = json.loads(bundled_path("zsre_mend_train-1k.json").read_text())[:6]
    rome = [to_rome_record(r) for r in load_requests(flat)]
    rome[1]["neighborhood_answers"] = ["a"] * len(rome[1]["neighborhood_prompts"])
    return {"counterfact_rome": rome, "counterfact_flat": flat, "zsre": zsre}


_VALID: dict[str, list[dict]] = {}


def valid_records(fmt: str) -> list[dict]:
    if not _VALID:
        _VALID.update(_valid_records())
    return _VALID[fmt]


def _request_invariants(reqs: Any) -> str | None:
    """Invariants of a loader's result (module docstring of mobiedit.requests)."""
    from mobiedit.requests import EditRequest

    if not isinstance(reqs, list) or not reqs:
        return f"result is {type(reqs).__name__} of length {len(reqs) if hasattr(reqs, '__len__') else '?'}"
    ids = set()
    for r in reqs:
        if not isinstance(r, EditRequest):
            return f"item is {type(r).__name__}"
        if r.prompt.count("{}") != 1:
            return f"prompt {r.prompt!r} has {r.prompt.count('{}')} slots"
        for t in (r.target_new, r.target_true, *r.neighborhood_answers):
            if t is not None and (not t or t != t.strip()):
                return f"unclean target {t!r}"
        if len(r.neighborhood_answers) != len(r.neighborhood_prompts):
            return "neighbour prompts and answers differ in length"
        if r.case_id in ids:
            return f"duplicate case_id {r.case_id!r}"
        ids.add(r.case_id)
        if r.rewrite_prompt.count(r.subject) < 1:
            return "rewrite prompt lacks the subject"
    return None


# Field names an error about a mutated key may name (the key itself, fields it is checked
# against, and the EditRequest fields it maps to).
RELATED: dict[str, dict[str, tuple[str, ...]]] = {
    "counterfact_flat": {
        "case_id": ("case_id",), "prompt": ("prompt", "subject"), "subject": ("subject", "prompt"),
        "target_new": ("target_new",), "ground_truth": ("ground_truth", "target_true"),
        "rephrase_prompt": ("rephrase_prompt", "paraphrase_prompts"),
        "locality_prompt": ("locality_prompt", "locality_ground_truth", "neighborhood_prompts",
                            "neighborhood_answers"),
        "locality_ground_truth": ("locality_ground_truth", "neighborhood_answers"),
    },
    "zsre": {
        "case_id": ("case_id",), "src": ("src", "subject", "prompt"), "subject": ("subject", "src", "prompt"),
        "alt": ("alt", "target_new"), "answers": ("answers", "target_true"),
        "rephrase": ("rephrase", "paraphrase_prompts"),
        "loc": ("loc", "loc_ans", "neighborhood_prompts", "neighborhood_answers"),
        "loc_ans": ("loc_ans", "neighborhood_answers"),
    },
    "counterfact_rome": {
        "case_id": ("case_id",), "requested_rewrite": ("requested_rewrite",),
        "requested_rewrite.prompt": ("requested_rewrite.prompt", "prompt"),
        "requested_rewrite.subject": ("requested_rewrite.subject", "subject"),
        "requested_rewrite.target_new": ("requested_rewrite.target_new", "target_new"),
        "requested_rewrite.target_true": ("requested_rewrite.target_true", "target_true", "neighborhood_answers"),
        "paraphrase_prompts": ("paraphrase_prompts",),
        "neighborhood_prompts": ("neighborhood_prompts", "neighborhood_answers",
                                 "requested_rewrite.target_true"),
        "neighborhood_answers": ("neighborhood_answers", "neighborhood_prompts"),
    },
}


def _near_valid(draw, value: Any, record: dict) -> Any:
    """A value close to a valid one: padded, emptied, braced, shortened, retyped."""
    kind = draw(st.sampled_from(["pad", "empty", "brace", "shorten", "wrap", "retype", "subject", "upper"]))
    if isinstance(value, str):
        if kind == "pad":
            return " " + value + draw(st.sampled_from([" ", "\t", "\n", ""]))
        if kind == "empty":
            return draw(st.sampled_from(["", " ", "\n"]))
        if kind == "brace":
            at = draw(st.integers(0, len(value)))
            return value[:at] + draw(st.sampled_from(["{}", "{", "}", "{}{}"])) + value[at:]
        if kind == "shorten":
            return value[: draw(st.integers(0, max(0, len(value) - 1)))]
        if kind == "wrap":
            return [value]
        if kind == "subject":
            return str(record.get("subject", "")) + " " + value
        if kind == "upper":
            return value.upper()
        return draw(st.integers() | st.none() | st.booleans())
    if isinstance(value, list):
        if kind in ("shorten", "empty") and value:
            return value[:-1]
        if kind == "pad":
            return value + value[:1]
        if kind == "wrap" and value:
            return value[0]
        if kind == "brace":
            return value + [draw(SCALARS)]
        return draw(st.dictionaries(st.text(max_size=3), SCALARS, max_size=2) | st.text(max_size=3))
    if isinstance(value, dict):
        return {k: draw(SCALARS) if draw(st.booleans()) else v for k, v in value.items()}
    return draw(SCALARS)


def _get_path(rec: dict, path: str) -> tuple[dict, str]:
    parts = path.split(".")
    obj = rec
    for p in parts[:-1]:
        obj = obj[p]
    return obj, parts[-1]


def request_record_case(fmt: str) -> Callable[[Any, Path], Case]:
    """Case factory for one of the three record formats."""

    def make(data, work: Path) -> Case:
        from mobiedit.requests import load_requests

        mode = data.draw(st.sampled_from(["mutate", "mutate", "mutate", "random", "python"]), label="mode")
        base = data.draw(st.sampled_from(valid_records(fmt)), label="base")
        rec = copy.deepcopy(base)
        fields: tuple[str, ...] | None = None
        desc = f"{fmt} {mode}"
        if mode == "mutate":
            key = data.draw(st.sampled_from(sorted(RELATED[fmt])), label="key")
            parent, last = _get_path(rec, key)
            how = data.draw(st.sampled_from(["delete", "replace", "near"]), label="how")
            if how == "delete":
                parent.pop(last, None)
            elif how == "replace":
                parent[last] = data.draw(JSON_VALUES, label="value")
            else:
                parent[last] = _near_valid(data.draw, parent.get(last), rec)
            fields = RELATED[fmt][key]
            desc += f" {how} {key}={_dumps(parent.get(last, '<deleted>'))[:120]}"
            records: list[Any] = [rec]
        elif mode == "random":
            records = data.draw(st.lists(st.dictionaries(st.sampled_from(KEYS), JSON_VALUES, max_size=10)
                                         | JSON_VALUES, min_size=1, max_size=3), label="records")
            desc += f" {_dumps(records)[:200]}"
        else:  # Python objects a caller may pass: tuples, non-str keys, objects, NaN
            odd = st.sampled_from([(1, 2), b"bytes", object(), float("nan"), {1: "a"}, {("t",): 1}, frozenset()])
            key = data.draw(st.sampled_from(sorted(k for k in RELATED[fmt] if "." not in k)), label="key")
            rec[key] = data.draw(odd | JSON_VALUES, label="value")
            if data.draw(st.booleans(), label="odd key"):
                rec[data.draw(st.sampled_from([1, None, ("k",), 2.5]), label="k")] = "x"
            records = [rec] if data.draw(st.booleans()) else [rec, data.draw(odd)]
            desc += f" {key}={rec[key]!r}"[:200]
        target_fmt = fmt if mode == "mutate" else data.draw(st.sampled_from(["auto", fmt]), label="fmt")
        skip = data.draw(st.booleans(), label="skip") if mode != "mutate" else False
        via_file = mode != "python" and data.draw(st.booleans(), label="via file")
        if via_file:
            jsonl = data.draw(st.booleans(), label="jsonl")
            path = work / ("r.jsonl" if jsonl else "r.json")
            text = "".join(_dumps(r) + "\n" for r in records) if jsonl else _dumps(records)
            path.write_text(text, encoding="utf-8")
            src: Any = path
        else:
            src = records
        return Case(lambda: load_requests(src, fmt=target_fmt, skip_invalid=skip), (RequestError,),
                    desc, fields=fields, check=_request_invariants)

    return make


def _corrupt_text(draw, text: str) -> str:
    """Apply one or two textual corruptions."""
    for _ in range(draw(st.integers(1, 2))):
        kind = draw(st.sampled_from(["truncate", "insert", "delete", "deep", "digits", "lines", "bom", "dup",
                                     "nothing"]))
        n = len(text)
        if kind == "truncate":
            text = text[: draw(st.integers(0, n))]
        elif kind == "insert":
            at = draw(st.integers(0, n))
            text = text[:at] + draw(st.text(max_size=5) | st.sampled_from(["\"", "{", "]", ",", "\n", "\\", "NaN"])) \
                + text[at:]
        elif kind == "delete" and n:
            at = draw(st.integers(0, n - 1))
            text = text[:at] + text[at + draw(st.integers(1, 8)):]
        elif kind == "deep":
            depth = draw(st.sampled_from([50, 1000, 100_000]))
            opener = draw(st.sampled_from(["[", "{\"a\":"]))
            text = draw(st.sampled_from(["", text + "\n"])) + opener * depth + "1" + (
                "]" * depth if opener == "[" else "}" * depth)
        elif kind == "digits":
            text = re.sub(r"\d+", "9" * draw(st.sampled_from([20, 4301, 20_000])), text, count=1) \
                if re.search(r"\d", text) else text + "[" + "1" * 5000 + "]"
        elif kind == "lines":
            text = text.replace("}, {", "}\n{").lstrip("[").rstrip("]")
        elif kind == "bom":
            text = "\ufeff" + text
        elif kind == "dup":
            text = text + text
    return text


def requests_file_case(data, work: Path) -> Case:
    from mobiedit.requests import FORMATS, load_requests

    kind = data.draw(st.sampled_from(["bytes", "json", "valid"]), label="kind")
    path = work / data.draw(st.sampled_from(["r.json", "r.jsonl", "r.txt"]), label="name")
    if kind == "bytes":
        raw = data.draw(st.binary(max_size=400), label="bytes")
        path.write_bytes(raw)
        desc = f"bytes {raw[:120]!r}"
    else:
        if kind == "json":
            text = _dumps(data.draw(JSON_VALUES, label="value"))
        else:
            fmt = data.draw(st.sampled_from(FORMATS), label="fmt")
            text = _dumps(valid_records(fmt)[: data.draw(st.integers(1, 4))])
        text = _corrupt_text(data.draw, text)
        encoded = text.encode("utf-8", "surrogatepass")
        if data.draw(st.integers(0, 9), label="bad utf8") == 0 and encoded:
            at = data.draw(st.integers(0, len(encoded)))
            encoded = encoded[:at] + b"\xff\xfe" + encoded[at:]
        path.write_bytes(encoded)
        desc = f"{kind} {encoded[:160]!r}"
    fmt = data.draw(st.sampled_from(("auto",) + FORMATS), label="fmt")
    skip = data.draw(st.booleans(), label="skip")
    return Case(lambda: load_requests(path, fmt=fmt, skip_invalid=skip), (RequestError,), desc,
                check=_request_invariants)


def requests_cli_case(data, work: Path) -> Case:
    from mobiedit.requests import requests_from_cli

    text = st.text(max_size=15) | st.sampled_from(SPECIAL_STRINGS + ["Paris", "{} is in Paris", "Paris is"])
    arg = text | st.none() | st.integers() | st.lists(st.text(max_size=3), max_size=2)
    subject, prompt, target = (data.draw(arg, label=n) for n in ("subject", "prompt", "target"))
    true = data.draw(arg, label="target_true")

    def check(reqs):
        return _request_invariants(reqs)

    return Case(lambda: requests_from_cli(subject, prompt, target, true), (RequestError,),
                f"cli {subject!r} {prompt!r} {target!r} {true!r}"[:300], check=check)


def request_from_dict_case(data, work: Path) -> Case:
    from mobiedit.requests import EditRequest, load_requests

    base = load_requests(valid_records("counterfact_flat")[:1])[0].to_dict()
    if data.draw(st.booleans(), label="mutate"):
        d = dict(base)
        key = data.draw(st.sampled_from(sorted(d)), label="key")
        d[key] = data.draw(JSON_VALUES | st.just(tuple(["a", "b"])), label="value")
        if data.draw(st.booleans(), label="drop"):
            d.pop(data.draw(st.sampled_from(sorted(d))), None)
        related = {"neighborhood_prompts": ("neighborhood_answers",), "neighborhood_answers": ("neighborhood_prompts",)}
        fields = (key, *related.get(key, ())) if len(d) == len(base) else None
    else:
        d = data.draw(st.dictionaries(st.sampled_from(sorted(base)) | st.text(max_size=4) | st.integers(),
                                      JSON_VALUES, max_size=10) | JSON_VALUES, label="dict")
        fields = None

    def check(r):
        return _request_invariants([r])

    return Case(lambda: EditRequest.from_dict(d), (RequestError,), f"from_dict {d!r}"[:300], fields=fields,
                check=check)


# ----------------------------------------------------------------------------- journal reader

def build_template_journal(folder: Path) -> None:
    """A valid journal: 4 edits over two modules, one undone."""
    import torch

    from mobiedit.journal import Journal, apply_factors
    from mobiedit.requests import load_requests

    reqs = load_requests(valid_records("counterfact_flat")[:4])
    model = toy_llama()
    j = Journal.open(folder)
    gen = torch.Generator().manual_seed(1)
    for i, req in enumerate(reqs):
        layer = 0 if i < 3 else 1
        weight = model.get_submodule(JOURNAL_MODULES[layer]).weight
        u, w = torch.randn(D_OUT, generator=gen), torch.randn(D_IN, generator=gen)
        j.record(req, "rome", "llama", layer, JOURNAL_MODULES[layer], u, w, weight.detach().clone(),
                 metrics={"succeeded": True}, config={"seed": i})
        with torch.no_grad():
            weight.copy_(apply_factors(weight, u, w, True))
    from mobiedit.families import FAMILIES

    j.undo(2, model, FAMILIES["llama"])


_TEMPLATE: dict[str, Path] = {}


def template_journal() -> Path:
    if "path" not in _TEMPLATE:
        import atexit

        path = Path(tempfile.mkdtemp(prefix="mobiedit-fuzz-journal-"))
        atexit.register(shutil.rmtree, path, True)
        build_template_journal(path / "j")
        _TEMPLATE["path"] = path / "j"
    return _TEMPLATE["path"]


def _safetensors_blob(draw, near: tuple[tuple[str, tuple[int, ...]], ...] = ()) -> bytes:
    """A safetensors file that parses but may hold wrong keys / dtypes / shapes / NaN. With
    ``near`` ((key, shape), ...) it is often the right keys and shapes in float32 with hostile
    values (NaN, Inf, 1e38) — a well-formed file a hash cannot tell from a good one."""
    import torch
    from safetensors.torch import save as st_save

    if near and draw(st.booleans()):
        fill = draw(st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e38, 1e20, 0.0, 1.0]))
        tensors = {k: torch.full(shape, 0.5) for k, shape in near}
        victim = draw(st.sampled_from([k for k, _ in near]))
        flat = tensors[victim].reshape(-1)
        flat[draw(st.integers(0, flat.numel() - 1))] = fill
        if draw(st.booleans()):
            tensors = {k: t * fill if fill == fill else t for k, t in tensors.items()}
        return st_save({k: t.contiguous() for k, t in tensors.items()})
    dtype = draw(st.sampled_from([torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int32,
                                  torch.uint8, torch.bool]))
    tensors = {}
    for key in draw(st.lists(st.sampled_from(["u", "w", "x", *JOURNAL_MODULES]), max_size=3, unique=True)):
        shape = draw(st.sampled_from([(D_OUT,), (D_IN,), (D_OUT, D_IN), (D_IN, D_OUT), (0,), (), (3, 3)]))
        fill = draw(st.sampled_from([0.0, 1.0, float("nan"), float("inf"), -1e38, 1e38]))
        t = torch.full(shape, fill) if shape else torch.tensor(fill)
        if draw(st.booleans()):
            t = t + torch.randn(shape, generator=torch.Generator().manual_seed(draw(st.integers(0, 9))))
        tensors[key] = t.to(dtype)
    return st_save(tensors)


def journal_case(data, work: Path) -> Case:
    import hashlib

    import torch

    from mobiedit.families import FAMILIES
    from mobiedit.journal import BASE_FILE, JOURNAL_FILE, Journal, factors_name

    folder = work / "journal"
    shutil.copytree(template_journal(), folder)
    jpath = folder / JOURNAL_FILE
    lines = jpath.read_text().split("\n")[:-1]
    objs = [json.loads(x) for x in lines]
    descs = []
    for _ in range(data.draw(st.integers(1, 3), label="n mutations")):
        kind = data.draw(st.sampled_from(["text", "field", "field", "lines", "factors", "factors", "base",
                                          "remove"]), label="kind")
        dict_lines = [n for n, o in enumerate(objs) if isinstance(o, dict)]
        if kind == "field" and dict_lines:
            i = data.draw(st.sampled_from(dict_lines), label="line")
            key = data.draw(st.sampled_from(sorted(objs[i]) + ["extra"]), label="key")
            how = data.draw(st.sampled_from(["replace", "delete", "near"]), label="how")
            if how == "delete":
                objs[i].pop(key, None)
            elif how == "near" and isinstance(objs[i].get(key), int) and not isinstance(objs[i].get(key), bool):
                objs[i][key] = objs[i][key] + data.draw(st.sampled_from([-10**6, -2, -1, 1, 2, 10**30]))
            elif how == "near" and isinstance(objs[i].get(key), str):
                objs[i][key] = _near_valid(data.draw, objs[i][key], {})
            else:
                objs[i][key] = data.draw(JSON_VALUES, label="value")
            descs.append(f"field line {i} {how} {key}={_dumps(objs[i].get(key, '<deleted>'))[:80]}")
        elif kind == "lines" and objs:
            op = data.draw(st.sampled_from(["drop", "dup", "swap", "insert"]), label="op")
            i = data.draw(st.integers(0, len(objs) - 1), label="at")
            if op == "drop":
                objs.pop(i)
            elif op == "dup":
                objs.insert(i, copy.deepcopy(objs[i]))
            elif op == "swap":
                j = data.draw(st.integers(0, len(objs) - 1))
                objs[i], objs[j] = objs[j], objs[i]
            else:
                objs.insert(i, data.draw(JSON_VALUES, label="line value"))
            descs.append(f"lines {op} {i}")
        elif kind == "factors":
            ided = [o for o in objs if isinstance(o, dict) and isinstance(o.get("id"), int)
                    and not isinstance(o.get("id"), bool) and 0 <= o["id"] < 10**7]
            e = data.draw(st.sampled_from(ided), label="entry") if ided else None
            name = factors_name(e["id"]) if e else factors_name(1)
            how = data.draw(st.sampled_from(["bytes", "truncate", "blob"]), label="how")
            path = folder / name
            if how == "bytes":
                blob = data.draw(st.binary(max_size=200), label="bytes")
            elif how == "truncate" and path.exists():
                raw = path.read_bytes()
                blob = raw[: data.draw(st.integers(0, len(raw)))]
            else:
                blob = _safetensors_blob(data.draw, (("u", (D_OUT,)), ("w", (D_IN,))))
            path.write_bytes(blob)
            if e is not None and data.draw(st.booleans(), label="fix sha"):
                e["sha256"] = hashlib.sha256(blob).hexdigest()
            descs.append(f"factors {name} {how} {blob[:60]!r}")
        elif kind == "base":
            how = data.draw(st.sampled_from(["bytes", "truncate", "blob"]), label="how")
            path = folder / BASE_FILE
            if how == "bytes":
                blob = data.draw(st.binary(max_size=200))
            elif how == "truncate":
                raw = path.read_bytes() if path.exists() else b""
                blob = raw[: data.draw(st.integers(0, len(raw)))]
            else:
                blob = _safetensors_blob(data.draw, tuple((m, (D_OUT, D_IN)) for m in JOURNAL_MODULES))
            path.write_bytes(blob)
            if how == "blob" and data.draw(st.booleans(), label="fix base sha"):
                from safetensors.torch import load as st_load

                from mobiedit.journal import tensor_sha256

                tensors = st_load(blob)
                for o in objs:
                    if isinstance(o, dict) and isinstance(o.get("module"), str) and o["module"] in tensors:
                        o["base_sha256"] = tensor_sha256(tensors[o["module"]])
            descs.append(f"base {how} {blob[:60]!r}")
        elif kind == "remove":
            names = sorted(p.name for p in folder.iterdir())
            if not names:
                continue
            victim = data.draw(st.sampled_from(names), label="file")
            (folder / victim).unlink()
            descs.append(f"remove {victim}")
        else:
            descs.append("text")
    text = "".join(_dumps(o) + "\n" for o in objs)
    if any(d == "text" for d in descs):
        text = _corrupt_text(data.draw, text)
    if (folder / JOURNAL_FILE).exists() or data.draw(st.booleans(), label="recreate"):
        (folder / JOURNAL_FILE).write_bytes(text.encode("utf-8", "surrogatepass"))

    def call():
        j = Journal.open(folder)
        for e in j.entries():
            j.load_factors(e)
        for module in {e.module for e in j.entries()}:
            j.base_weight(module)
            j.rebuild(module)
        if j.entries():
            fam = FAMILIES["llama"]
            model = toy_llama()
            j.bake(model, fam)
            for p in model.parameters():
                if not torch.isfinite(p).all():
                    return "baked a non-finite weight"
            active = j.entries(active_only=True)
            if active:
                j.undo(active[-1].id, model, fam)
        return None

    return Case(call, (JournalError,), "; ".join(descs)[:400], check=lambda r: r)


# ----------------------------------------------------------------------------- native engine buffers

def _arrays(draw) -> Any:
    """A buffer-like value: numpy arrays of any dtype / shape / layout / values, lists (also
    ragged), scalars, strings, None, torch tensors, arbitrary objects."""
    kind = draw(st.sampled_from(["ndarray", "ndarray", "ndarray", "list", "ragged", "scalar", "none", "str",
                                 "torch", "object", "noncontig", "readonly", "bytes"]))
    if kind in ("ndarray", "noncontig", "readonly", "torch"):
        dtype = draw(st.sampled_from([np.float32, np.float32, np.float64, np.float16, np.int32, np.int64,
                                      np.bool_, np.complex64, np.uint8]))
        shape = draw(st.sampled_from([(0,), (1,), (3,), (4,), (6,), (8,), (2, 3), (4, 1), (), (1, 4, 1)]))
        elems = None
        if np.dtype(dtype).kind == "f":
            elems = st.floats(allow_nan=True, allow_infinity=True, width=np.dtype(dtype).itemsize * 8) \
                if draw(st.integers(0, 3)) == 0 else st.floats(-3, 3, width=np.dtype(dtype).itemsize * 8)
        arr = draw(hnp.arrays(dtype, shape, elements=elems))
        if kind == "noncontig" and arr.ndim >= 1:
            arr = np.repeat(arr, 2, axis=0)[::2]
        if kind == "readonly":
            arr.setflags(write=False)
        if kind == "torch":
            import torch

            try:
                return torch.from_numpy(np.ascontiguousarray(arr))
            except TypeError:
                return arr
        return arr
    if kind == "list":
        return draw(st.lists(st.floats(allow_nan=True) | st.integers(-5, 5), max_size=8))
    if kind == "ragged":
        return draw(st.lists(st.lists(st.floats(-2, 2), max_size=3) | st.floats(-2, 2), min_size=2, max_size=4))
    if kind == "scalar":
        return draw(st.floats(allow_nan=True) | st.integers(-5, 5) | st.just(np.float32(1.0)))
    if kind == "none":
        return None
    if kind == "str":
        return draw(st.text(max_size=4))
    if kind == "bytes":
        return draw(st.binary(max_size=8))
    return draw(st.sampled_from([object(), {"a": 1}, {1, 2}, (1.0, "x"), Ellipsis]))


def _zo_cfg(estimator: str = "fzoo"):
    from mobiedit.zo import ZOConfig

    return ZOConfig(estimator=estimator, n_dirs=2, max_steps=3, seed=0)


def _quad(D: np.ndarray) -> np.ndarray:
    return ((D.astype(np.float64) - 0.5) ** 2).sum(axis=1).astype(np.float32)


def native_x0_case(data, work: Path) -> Case:
    from mobiedit.zo import run_zo

    x0 = _arrays(data.draw)
    backend = data.draw(st.sampled_from(["native", "native", "python"]), label="backend")

    def call():
        run_zo(_quad, None, x0, _zo_cfg(), backend=backend).raise_for_status()

    return Case(call, (MobiEditError,), f"{backend} x0={x0!r}"[:300])


def native_losses_case(data, work: Path) -> Case:
    from mobiedit.zo import run_zo

    outs = [_arrays(data.draw) for _ in range(data.draw(st.integers(1, 3), label="n"))]
    good = data.draw(st.booleans(), label="first good")
    backend = data.draw(st.sampled_from(["native", "native", "python"]), label="backend")
    estimator = data.draw(st.sampled_from(["fzoo", "paper", "antithetic"]), label="estimator")
    calls = [0]

    def forward(D):
        calls[0] += 1
        if good and calls[0] == 1:
            return _quad(D)
        return outs[calls[0] % len(outs)]

    def call():
        run_zo(forward, None, np.zeros(4, np.float32), _zo_cfg(estimator), backend=backend).raise_for_status()

    return Case(call, (MobiEditError,), f"{backend} {estimator} losses={outs!r}"[:300])


def native_rank_one_case(data, work: Path) -> Case:
    from mobiedit.zo import rank_one_factors

    k, v, wk = (_arrays(data.draw) for _ in range(3))
    c = _arrays(data.draw) if data.draw(st.booleans(), label="c") else None

    def check(res):
        u, w = res
        if not (np.all(np.isfinite(u)) and np.all(np.isfinite(w))):
            return "non-finite factors"
        return None

    return Case(lambda: rank_one_factors(k, v, wk, c), (MobiEditError,),
                f"k={k!r} v={v!r} wk={wk!r} c={c!r}"[:300], check=check)


def native_raw_case(data, work: Path) -> Case:
    """The raw extension (documented TypeError/ValueError for buffer dtype/shape/layout)."""
    from mobiedit.zo import load_native
    from mobiedit.zo.native_backend import native_config

    native = load_native()
    op = data.draw(st.sampled_from(["x0", "losses", "rank_one", "directions", "engine_d", "config"]), label="op")
    names: tuple[str, ...] = ()
    if op == "x0":
        x0 = _arrays(data.draw)
        eng = native.Engine(native_config(native, _zo_cfg()), 4)
        how = data.draw(st.sampled_from(["run", "reset"]))
        call = (lambda: eng.run(_quad, None, x0)) if how == "run" else (lambda: eng.reset(x0))
        names, desc = ("x0",), f"{how} x0={x0!r}"
    elif op == "losses":
        out = _arrays(data.draw)
        eng = native.Engine(native_config(native, _zo_cfg()), 4)
        call, names, desc = (lambda: eng.run(lambda D: out)), ("forward", "loss"), f"losses={out!r}"
    elif op == "rank_one":
        k, v, wk = (_arrays(data.draw) for _ in range(3))
        c = _arrays(data.draw) if data.draw(st.booleans()) else None
        call = lambda: native.rank_one(k, v, wk, c)  # noqa: E731
        names, desc = ("k_star", "v_star", "w_k", "c", "incompatible function arguments"), \
            f"rank_one k={k!r} v={v!r} wk={wk!r} c={c!r}"
    elif op == "directions":
        args = (data.draw(st.sampled_from(["rademacher", "gaussian", "", "x"])),
                data.draw(st.integers(-1, 2**64) | st.none()), data.draw(st.integers(-2, 3)),
                data.draw(st.integers(-2, 6)), data.draw(st.integers(-2, 6)), data.draw(st.integers(-1, 3)))
        call = lambda: native.directions(*args)  # noqa: E731
        names, desc = ("kind", "rademacher", "n ", "d ", "n=", "d=", "incompatible function arguments",
                       "must be"), f"directions{args!r}"
    elif op == "engine_d":
        d = data.draw(st.integers(-3, 40) | st.floats(allow_nan=True) | st.none() | st.text(max_size=2))
        call = lambda: native.Engine(native_config(native, _zo_cfg()), d)  # noqa: E731
        names, desc = ("delta length", "incompatible", "d "), f"Engine d={d!r}"
    else:
        name = data.draw(st.sampled_from(["n_dirs", "h", "lr", "estimator", "optimizer", "seed", "max_steps",
                                          "max_norm", "beta1", "max_evals"]))
        value = data.draw(SCALARS | st.floats(allow_nan=True))

        def call():
            c = native.Config()
            setattr(c, name, value)
            native.Engine(c, 4)

        names, desc = (name, "incompatible", "unable to convert"), f"Config.{name}={value!r}"
    return Case(call, (MobiEditError,), desc[:300], builtin=(TypeError, ValueError, OverflowError),
                builtin_names=names)


# ----------------------------------------------------------------------------- registry and driver

# ----------------------------------------------------------------------------- bundle manifest

def _valid_manifest(folder: Path) -> dict:
    """A complete manifest that ``read_manifest`` + ``verify_files`` accept, with its one file."""
    from .fuzz_hostile import valid_manifest

    return valid_manifest(folder)


def bundle_manifest_case(data, work: Path) -> Case:
    from mobiedit.export.bundle import read_manifest, verify_files

    from mobiedit.errors import BundleError

    folder = work / "bundle"
    folder.mkdir()
    m = _valid_manifest(folder)
    descs = []
    for _ in range(data.draw(st.integers(0, 3), label="n mutations")):
        kind = data.draw(st.sampled_from(["field", "field", "nested", "text", "file"]), label="kind")
        if kind == "field":
            key = data.draw(st.sampled_from(sorted(m) + ["extra"]), label="key")
            if data.draw(st.booleans(), label="delete"):
                m.pop(key, None)
            else:
                m[key] = data.draw(JSON_VALUES | st.integers(-5, 5), label="value")
            descs.append(f"field {key}={_dumps(m.get(key, '<deleted>'))[:60]}")
        elif kind == "nested" and isinstance(m.get("files"), dict) and m["files"]:
            name = data.draw(st.sampled_from(sorted(m["files"])), label="file")
            m["files"][name] = data.draw(JSON_VALUES, label="meta")
            descs.append(f"files.{name}={_dumps(m['files'][name])[:60]}")
        elif kind == "file":
            (folder / "model.pte").write_bytes(data.draw(st.binary(max_size=20), label="bytes"))
            descs.append("model.pte rewritten")
        else:
            descs.append("text")
    text = _dumps(m) if not descs or descs[-1] != "text" else data.draw(st.text(max_size=40), label="text")
    (folder / "manifest.json").write_text(text, encoding="utf-8", errors="surrogatepass")

    def call():
        man = read_manifest(folder)
        verify_files(folder, man)
        return man

    return Case(call, (BundleError,), f"manifest {'; '.join(descs) or 'valid'}"[:300])


@dataclass(frozen=True)
class Target:
    name: str
    make: Callable[[Any, Path], Case]
    weight: float  # share of the example budget


TARGETS: dict[str, Target] = {t.name: t for t in [
    Target("requests.file", requests_file_case, 2.0),
    Target("requests.counterfact_rome", request_record_case("counterfact_rome"), 1.5),
    Target("requests.counterfact_flat", request_record_case("counterfact_flat"), 1.5),
    Target("requests.zsre", request_record_case("zsre"), 1.5),
    Target("requests.cli", requests_cli_case, 0.5),
    Target("requests.from_dict", request_from_dict_case, 0.5),
    Target("journal", journal_case, 2.0),
    Target("bundle.manifest", bundle_manifest_case, 1.0),
    Target("native.x0", native_x0_case, 1.0),
    Target("native.losses", native_losses_case, 1.0),
    Target("native.rank_one", native_rank_one_case, 0.5),
    Target("native.raw", native_raw_case, 1.0),
    Target("bundle.manifest_hostile", lambda data, work: _hostile().manifest_hostile_case(data, work), 1.0),
    Target("journal.hostile", lambda data, work: _hostile().journal_hostile_case(data, work), 1.0),
    Target("model.config", lambda data, work: _hostile().config_case(data, work), 1.0),
]}


def _hostile():
    from . import fuzz_hostile

    return fuzz_hostile


@dataclass
class Tally:
    """Counts per target and outcome, with the first few crash details."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    crashes: list[dict] = field(default_factory=list)
    crash_kinds: dict[str, int] = field(default_factory=dict)  # "target: first words of the detail" -> count
    samples: dict[str, list[str]] = field(default_factory=dict)
    max_seconds: float = 0.0  # the slowest single input (build + read), and which it was
    slowest: str = ""
    first_seconds: float = 0.0  # the slowest first input of a target (includes the reader's imports)
    max_rss_growth_mb: float = 0.0  # the largest rise of the process's peak RSS during one input

    def add(self, target: str, outcome: str, detail: str, desc: str) -> None:
        row = self.counts.setdefault(target, {ACCEPTED: 0, REJECTED: 0, BUILTIN: 0, CRASH: 0})
        row[outcome] += 1
        if outcome == CRASH:
            kind = f"{target}: {detail[:70]}"
            self.crash_kinds[kind] = self.crash_kinds.get(kind, 0) + 1
            if len(self.crashes) < 50:
                self.crashes.append({"target": target, "detail": detail, "input": desc})
        if outcome == REJECTED and len(self.samples.setdefault(target, [])) < 3:
            self.samples[target].append(detail)

    def total(self, outcome: str | None = None) -> int:
        return sum(sum(r.values()) if outcome is None else r[outcome] for r in self.counts.values())


def run_case(target: Target, data, root: Path) -> tuple[str, str, str]:
    """Build and classify one case of ``target`` in a fresh folder under ``root``."""
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        try:
            case = target.make(data, work)
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # the generator itself must not fail; report it loudly
            if type(err).__name__ in ("StopTest", "Frozen", "UnsatisfiedAssumption"):
                raise
            return CRASH, f"case generator failed: {type(err).__name__}: {err}", target.name
        outcome, detail = classify(case)
        return outcome, detail, case.desc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MB (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fuzz_target(target: Target, n: int, tally: Tally, root: Path, seed: int | None = None) -> None:
    """Run ``n`` generated examples of ``target`` (no shrinking), adding to ``tally``."""
    sett = settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))

    first = [True]

    @sett
    @given(st.data())
    def prop(data):
        t0, rss0 = time.perf_counter(), _peak_rss_mb()
        outcome, detail, desc = run_case(target, data, root)
        took = time.perf_counter() - t0
        tally.max_rss_growth_mb = max(tally.max_rss_growth_mb, _peak_rss_mb() - rss0)
        if first[0]:  # the target's first input also pays for importing its reader
            first[0] = False
            tally.first_seconds = max(tally.first_seconds, took)
        elif took > tally.max_seconds:
            tally.max_seconds, tally.slowest = took, f"{target.name}: {desc}"[:200]
        tally.add(target.name, outcome, detail, desc)

    if seed is not None:
        prop = hyp_seed(seed)(prop)
    prop()


def run_fuzz(examples: int, targets: list[str] | None = None, seed: int | None = None,
             progress: bool = False) -> Tally:
    """Split ``examples`` over ``targets`` by weight and fuzz each; returns the tally."""
    chosen = [TARGETS[t] for t in (targets or list(TARGETS))]
    weight = sum(t.weight for t in chosen)
    tally = Tally()
    root = Path(tempfile.mkdtemp(prefix="mobiedit-fuzz-"))
    try:
        for t in chosen:
            n = max(1, math.ceil(examples * t.weight / weight))
            t0 = time.perf_counter()
            fuzz_target(t, n, tally, root, seed)
            if progress:
                row = tally.counts.get(t.name, {})
                print(f"  {t.name:<28} {sum(row.values()):>6} examples in {time.perf_counter() - t0:6.1f}s",
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tally


def format_tally(tally: Tally) -> str:
    head = f"{'target':<28}{'inputs':>8}{'accepted':>10}{'rejected':>10}{'builtin':>9}{'crashes':>9}"
    rows = [head]
    for name, r in tally.counts.items():
        rows.append(f"{name:<28}{sum(r.values()):>8}{r[ACCEPTED]:>10}{r[REJECTED]:>10}{r[BUILTIN]:>9}{r[CRASH]:>9}")
    rows.append(f"{'TOTAL':<28}{tally.total():>8}{tally.total(ACCEPTED):>10}{tally.total(REJECTED):>10}"
                f"{tally.total(BUILTIN):>9}{tally.total(CRASH):>9}")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.reliability.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--examples", type=int, default=10_000, help="total generated inputs (split by target weight)")
    p.add_argument("--targets", nargs="*", choices=sorted(TARGETS), help="default: all")
    p.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    p.add_argument("--json", help="write the counts and crash details here")
    args = p.parse_args(argv)
    import logging

    import torch

    torch.set_num_threads(1)
    logging.basicConfig(level=logging.ERROR)  # loaders log skipped records as warnings
    import resource

    t0 = time.perf_counter()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tally = run_fuzz(args.examples, args.targets, args.seed, progress=True)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(format_tally(tally))
    print(f"per input: at most {tally.max_seconds * 1000:.0f} ms (slowest: {tally.slowest}; a target's first input, "
          f"which also imports its reader: at most {tally.first_seconds * 1000:.0f} ms); peak RSS of the whole run "
          f"{peak:.0f} MB (after imports {rss0:.0f} MB); largest rise of the peak RSS during one input "
          f"{tally.max_rss_growth_mb:.1f} MB")
    print(f"fuzzed inputs: {tally.total()}  crashes: {tally.total(CRASH)}  named rejections: "
          f"{tally.total(REJECTED)} (+{tally.total(BUILTIN)} named builtin errors of the raw extension)  "
          f"accepted: {tally.total(ACCEPTED)}  wall: {wall:.0f}s")
    for kind, n in sorted(tally.crash_kinds.items(), key=lambda kv: -kv[1]):
        print(f"crash kind ({n}x): {kind}")
    for c in tally.crashes[:10]:
        print(f"CRASH [{c['target']}] {c['detail']}\n    input: {c['input']}")
    if args.json:
        from mobiedit.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps({"counts": tally.counts, "crash_kinds": tally.crash_kinds,
                                                 "crashes": tally.crashes,
                                                 "samples": tally.samples, "wall_seconds": wall,
                                                 "max_input_seconds": tally.max_seconds, "slowest": tally.slowest,
                                                 "peak_rss_mb": peak, "rss_after_imports_mb": rss0,
                                                 "max_rss_growth_mb": tally.max_rss_growth_mb,
                                                 "seed": args.seed}, indent=1))
    return 1 if tally.total(CRASH) else 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
