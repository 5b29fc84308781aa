"""Fuzz target of the journal reader (``journal``): a valid template journal (built once per
process by :func:`build_template_journal` / :func:`template_journal`, also used by
``fuzz_hostile`` and the tests) is copied and damaged — its ``journal.jsonl`` text, a line's
fields, the order of its lines, its factors files or ``base.safetensors`` (bytes, truncation, or a
well-formed safetensors file from :func:`_safetensors_blob`, optionally with the sha256 updated) —
then opened, read, rebuilt, baked into a toy model and undone.
"""
from __future__ import annotations

import copy
import json
import shutil
import tempfile
from pathlib import Path

from hypothesis import strategies as st

from mobiedit.errors import JournalError

from .fuzz_core import JSON_VALUES, Case, _dumps
from .fuzz_requests import _corrupt_text, _near_valid, valid_records
from .toy import D_IN, D_OUT, JOURNAL_MODULES, toy_llama


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
