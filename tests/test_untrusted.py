"""Untrusted files: pickles are never unpickled, custom code is never run, damaged or mismatched
checkpoints and journals are refused with a named error (never loaded half-way)."""
from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from mobiedit.errors import JournalError, ModelLoadError, RequestError
from mobiedit.models import load_model

ROOT = Path(__file__).resolve().parents[1]


class _Payload:
    """Unpickling this runs ``touch <marker>``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def _copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# ----------------------------------------------------------------------------- audit of the code base

UNSAFE = [
    (re.compile(r"\btorch\.load\s*\("), "torch.load"),
    (re.compile(r"\bpickle\.loads?\s*\(|\bcPickle\b|\bdill\b|\bjoblib\.load\b|\bmarshal\.loads?\b"), "pickle"),
    (re.compile(r"weights_only\s*=\s*False"), "weights_only=False"),
    (re.compile(r"allow_pickle\s*=\s*True"), "np.load(allow_pickle=True)"),
    (re.compile(r"\byaml\.(load|unsafe_load|full_load)\s*\("), "yaml.load"),
    (re.compile(r"trust_remote_code\s*=\s*True"), "trust_remote_code=True"),
    (re.compile(r"(?<![\w.])(eval|exec)\s*\("), "eval/exec"),
]


def _sources() -> list[Path]:
    skip = {".venv", "build", "tests", "runs", ".git", "node_modules"}
    return [p for p in ROOT.rglob("*.py") if not skip & set(p.relative_to(ROOT).parts)]


def test_no_unpickling_or_remote_code_anywhere_in_the_code_base():
    """torch.load / pickle / unsafe yaml / remote code are not used by any shipped Python file
    (torch.load would need weights_only=True; there is none today)."""
    files = _sources()
    assert len(files) > 30 and any(p.name == "journal.py" for p in files)
    hits = []
    for path in files:
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            code = line.split("#", 1)[0]
            for pat, what in UNSAFE:
                if pat.search(code) and not (what == "torch.load" and "weights_only=True" in code):
                    hits.append(f"{path.relative_to(ROOT)}:{n}: {what}: {line.strip()}")
    assert hits == []


def test_audit_patterns_catch_what_they_should():
    bad = ["x = torch.load(f)", "pickle.loads(b)", "torch.load(f, weights_only=False)", "yaml.load(s)",
           "np.load(f, allow_pickle=True)", "AutoModel.from_pretrained(p, trust_remote_code=True)", "eval(s)"]
    for line in bad:
        assert any(p.search(line) for p, _ in UNSAFE), line
    for line in ["yaml.safe_load(s)", "model.eval()", "torch.load(f, weights_only=True)  # ok", "load_file(p)"]:
        hits = [w for p, w in UNSAFE if p.search(line)]
        assert hits in ([], ["torch.load"]), (line, hits)  # torch.load with weights_only=True is allowed


# ----------------------------------------------------------------------------- pickles and custom code

@pytest.mark.parametrize("name", ["pytorch_model.bin", "training_args.bin", "optimizer.pt", "model.ckpt"])
def test_pickles_beside_safetensors_are_never_unpickled(tmp_path, tiny_llama_dir, name):
    folder = _copy(tiny_llama_dir, tmp_path / "m")
    marker = tmp_path / "PWNED"
    (folder / name).write_bytes(pickle.dumps(_Payload(marker)))
    lm = load_model(folder)
    assert type(lm.model).__name__ == "LlamaForCausalLM"
    assert not marker.exists()


def test_pickle_only_checkpoint_is_refused_without_unpickling(tmp_path, tiny_llama_dir):
    folder = _copy(tiny_llama_dir, tmp_path / "m")
    marker = tmp_path / "PWNED"
    (folder / "model.safetensors").unlink()
    (folder / "pytorch_model.bin").write_bytes(pickle.dumps(_Payload(marker)))
    with pytest.raises(ModelLoadError, match=r"no \*\.safetensors weights \(found pickled \['pytorch_model.bin'\]\)"):
        load_model(folder)
    assert not marker.exists()


def test_custom_code_in_config_is_never_run(tmp_path, tiny_llama_dir):
    folder = _copy(tiny_llama_dir, tmp_path / "m")
    marker = tmp_path / "PWNED"
    cfg = json.loads((folder / "config.json").read_text())
    cfg["auto_map"] = {"AutoConfig": "evil.EvilConfig", "AutoModelForCausalLM": "evil.EvilModel"}
    (folder / "config.json").write_text(json.dumps(cfg))
    tcfg = json.loads((folder / "tokenizer_config.json").read_text())
    tcfg["auto_map"] = {"AutoTokenizer": ["evil.EvilTokenizer", None]}
    (folder / "tokenizer_config.json").write_text(json.dumps(tcfg))
    (folder / "evil.py").write_text(f"open({str(marker)!r}, 'w').write('x')\n")
    lm = load_model(folder)  # the built-in llama class; the folder's evil.py is never imported
    assert type(lm.model).__name__ == "LlamaForCausalLM" and not marker.exists()
    cfg["model_type"] = "evil"
    (folder / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError):
        load_model(folder)
    assert not marker.exists()


# ----------------------------------------------------------------------------- damaged / mismatched checkpoints

def _rewrite_weights(folder: Path, fn) -> None:
    tensors = load_file(folder / "model.safetensors")
    fn(tensors)
    save_file(tensors, folder / "model.safetensors", metadata={"format": "pt"})


def _drop_down_proj(t):
    del t["model.layers.0.mlp.down_proj.weight"]


def _nan_down_proj(t):
    t["model.layers.0.mlp.down_proj.weight"][0, 0] = float("nan")


def _config(**kw):
    def fn(folder: Path):
        cfg = json.loads((folder / "config.json").read_text())
        cfg.update(kw)
        (folder / "config.json").write_text(json.dumps(cfg))
    return fn


DAMAGE = {
    "garbage weights": (lambda f: (f / "model.safetensors").write_bytes(b"\x00" * 100), "not a safetensors file"),
    "truncated weights": (lambda f: (f / "model.safetensors").write_bytes(
        (f / "model.safetensors").read_bytes()[:50_000]), "cannot load"),
    "huge header": (lambda f: (f / "model.safetensors").write_bytes(struct.pack("<Q", 2**60) + b"{}"), "not a safetensors file"),
    "empty weights": (lambda f: (f / "model.safetensors").write_bytes(b""), "not a safetensors file"),
    "missing tensor": (lambda f: _rewrite_weights(f, _drop_down_proj), "missing keys"),
    "NaN weight": (lambda f: _rewrite_weights(f, _nan_down_proj), "contains NaN/Inf"),
    "fewer layers in config": (_config(num_hidden_layers=2), "num_hidden_layers = 2, but the weights hold layers"),
    "wrong width in config": (_config(vocab_size=1000), "vocab_size = 1000, but the weights"),
    "wrong field type in config": (_config(hidden_size="big"), "field 'hidden_size': invalid value"),
    "config not an object": (lambda f: (f / "config.json").write_text("[1, 2]"), "not an object"),
    "config not UTF-8": (lambda f: (f / "config.json").write_bytes(b"\xff\xfe{"), "not readable JSON"),
    "config nested too deep": (lambda f: (f / "config.json").write_text("[" * 100_000), "not readable JSON"),
    "tokenizer garbage": (lambda f: (f / "tokenizer.json").write_text("{garbage"), "cannot load"),
    "weights are a folder": (lambda f: ((f / "model.safetensors").unlink(), (f / "model.safetensors").mkdir()),
                             "not a regular file"),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_damaged_checkpoint_is_refused_with_a_named_error(tmp_path, tiny_llama_dir, name):
    damage, match = DAMAGE[name]
    folder = _copy(tiny_llama_dir, tmp_path / "m")
    damage(folder)
    with pytest.raises(ModelLoadError, match=match) as info:
        load_model(folder)
    assert info.value.where and str(folder) in str(info.value) and "\n" not in str(info.value)


def test_cli_reports_a_damaged_checkpoint_on_one_line(tmp_path, tiny_llama_dir, capsys):
    from mobiedit.cli import main

    folder = _copy(tiny_llama_dir, tmp_path / "m")
    _rewrite_weights(folder, _drop_down_proj)
    rc = main(["--quiet", "eval", "--model", str(folder), "--subject", "A", "--prompt", "{} is", "--target", "b"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("mobiedit: error:") and "missing keys" in err[-1]


# ----------------------------------------------------------------------------- journals and request files

@pytest.fixture
def journal_dir(tmp_path):
    from tools.reliability.fuzz import build_template_journal

    folder = tmp_path / "journal"
    build_template_journal(folder)
    return folder


def test_pickled_factors_file_is_refused_without_unpickling(journal_dir, tmp_path):
    import hashlib

    from mobiedit.journal import JOURNAL_FILE, Journal

    marker = tmp_path / "PWNED"
    blob = pickle.dumps({"u": _Payload(marker)})
    (journal_dir / "edit-000001.safetensors").write_bytes(blob)
    with pytest.raises(JournalError, match="field 'sha256'"):
        Journal.open(journal_dir)
    lines = (journal_dir / JOURNAL_FILE).read_text().split("\n")
    obj = json.loads(lines[0])
    obj["sha256"] = hashlib.sha256(blob).hexdigest()  # a consistent but hostile journal
    lines[0] = json.dumps(obj)
    (journal_dir / JOURNAL_FILE).write_text("\n".join(lines))
    j = Journal.open(journal_dir)
    with pytest.raises(JournalError, match="not valid safetensors"):
        j.load_factors(j.entry(1))
    assert not marker.exists()


def test_journal_from_a_newer_format_version_is_refused(journal_dir):
    from mobiedit.journal import JOURNAL_FILE, Journal
    from mobiedit.journal_entry import VERSION

    lines = (journal_dir / JOURNAL_FILE).read_text().split("\n")
    obj = json.loads(lines[1])
    obj["version"] = VERSION + 1
    lines[1] = json.dumps(obj)
    (journal_dir / JOURNAL_FILE).write_text("\n".join(lines))
    with pytest.raises(JournalError, match=r"line 2 \(edit 2\), field 'version'.*newer mobiedit"):
        Journal.open(journal_dir)


@pytest.mark.parametrize("fill", [float("nan"), float("inf")])
def test_hostile_non_finite_factors_or_base_are_refused(journal_dir, fill):
    """Well-formed safetensors with NaN/Inf and a matching sha256 are still refused."""
    import hashlib

    from safetensors.torch import save as st_save

    from mobiedit.journal import BASE_FILE, JOURNAL_FILE, Journal, tensor_sha256

    blob = st_save({"u": torch.full((4,), fill), "w": torch.ones(6)})
    (journal_dir / "edit-000001.safetensors").write_bytes(blob)
    objs = [json.loads(x) for x in (journal_dir / JOURNAL_FILE).read_text().split("\n")[:-1]]
    objs[0]["sha256"] = hashlib.sha256(blob).hexdigest()
    (journal_dir / JOURNAL_FILE).write_text("".join(json.dumps(o) + "\n" for o in objs))
    j = Journal.open(journal_dir)
    with pytest.raises(JournalError, match="factor 'u' contains NaN/Inf"):
        j.rebuild(j.entry(1).module)
    base = {k: v.clone() for k, v in load_file(journal_dir / BASE_FILE).items()}
    module = objs[3]["module"]
    base[module][1, 2] = fill
    save_file(base, journal_dir / BASE_FILE)
    objs[3]["base_sha256"] = tensor_sha256(base[module])
    (journal_dir / JOURNAL_FILE).write_text("".join(json.dumps(o) + "\n" for o in objs))
    with pytest.raises(JournalError, match="contains NaN/Inf"):
        Journal.open(journal_dir).base_weight(module)


def test_factors_that_overflow_the_weight_are_refused(journal_dir):
    """Finite factors whose product overflows float32: record refuses them; a journal holding
    them fails to rebuild with a named error."""
    import hashlib

    from safetensors.torch import save as st_save

    from mobiedit.errors import NumericalError
    from mobiedit.journal import JOURNAL_FILE, Journal

    j = Journal.open(journal_dir)
    big = torch.full((4,), 3e38)
    with pytest.raises(NumericalError, match="overflow"):
        j.record({"x": 1}, "rome", "llama", 0, j.entry(1).module, big, torch.full((6,), 10.0),
                 j.rebuild(j.entry(1).module))
    assert len(Journal.open(journal_dir).entries()) == 4  # nothing recorded
    blob = st_save({"u": big, "w": torch.full((6,), 10.0)})
    (journal_dir / "edit-000001.safetensors").write_bytes(blob)
    objs = [json.loads(x) for x in (journal_dir / JOURNAL_FILE).read_text().split("\n")[:-1]]
    objs[0]["sha256"] = hashlib.sha256(blob).hexdigest()
    (journal_dir / JOURNAL_FILE).write_text("".join(json.dumps(o) + "\n" for o in objs))
    j = Journal.open(journal_dir)
    with pytest.raises(JournalError, match=r"edit 1, field 'factors'.*overflow"):
        j.rebuild(j.entry(1).module)


def test_pickle_as_request_file_is_a_request_error(tmp_path):
    from mobiedit.requests import load_requests

    marker = tmp_path / "PWNED"
    path = tmp_path / "requests.json"
    path.write_bytes(pickle.dumps([_Payload(marker)]))
    with pytest.raises(RequestError) as info:
        load_requests(path)
    assert str(path) in info.value.where and not marker.exists()
