"""Fuzz targets of the request loaders (:mod:`mobiedit.requests`): ``requests.file`` (arbitrary
and corrupted file contents through ``load_requests``), ``requests.counterfact_rome`` /
``requests.counterfact_flat`` / ``requests.zsre`` (a valid record with one field replaced,
removed or made near-valid, random records, odd Python objects), ``requests.cli`` and
``requests.from_dict``; with the valid records they start from (:func:`valid_records`), the
invariants an accepted result must satisfy (:func:`_request_invariants`), the fields an error
about a mutated key may name (``RELATED``) and the value / text mutators :func:`_near_valid` and
:func:`_corrupt_text`, which the journal target reuses.
"""
from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any, Callable

from hypothesis import strategies as st

from mobiedit.errors import RequestError

from .fuzz_core import JSON_VALUES, KEYS, SCALARS, SPECIAL_STRINGS, Case, _dumps


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
