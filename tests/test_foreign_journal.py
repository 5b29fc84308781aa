"""Issue 19 case 4: a journal made on another model of the same shape is refused (named error), in a
model folder (edit, eval, undo) and in a bundle (run, edit, undo) — mobiedit.journal_guard."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save

from mobiedit.errors import JournalError
from mobiedit.journal import Journal

MODULE = "model.layers.0.mlp.down_proj"


def _run(*args):
    return subprocess.run([sys.executable, "-m", "mobiedit.cli", "--quiet", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _edited_copy(src, dst, shift: float = 0.0):
    """``src`` saved to ``dst`` with one journaled rank-one edit of MODULE baked in (as `edit --out`
    writes it); ``shift`` first changes the module's weight (another model of the same shape)."""
    from mobiedit.journal import apply_factors
    from mobiedit.models import load_model

    lm = load_model(src)
    weight = lm.model.get_submodule(MODULE).weight
    with torch.no_grad():
        weight.add_(shift)
    j = Journal.open(dst / "journal")
    gen = torch.Generator().manual_seed(0)
    u, w = torch.randn(weight.shape[0], generator=gen), torch.randn(weight.shape[1], generator=gen)
    j.record({"case_id": "x"}, "rome", lm.family, 0, MODULE, u, w, weight.detach().clone())
    with torch.no_grad():
        weight.copy_(apply_factors(weight, u, w, True))
    lm.model.save_pretrained(dst, safe_serialization=True)
    lm.tokenizer.save_pretrained(dst)
    return dst


@pytest.fixture
def foreign_model(tmp_path, tiny_llama_dir):
    a = _edited_copy(tiny_llama_dir, tmp_path / "a")
    b = tmp_path / "b"
    b.mkdir()
    from mobiedit.models import load_model

    lm = load_model(tiny_llama_dir)
    with torch.no_grad():
        lm.model.get_submodule(MODULE).weight.mul_(1.01)  # same shape, other weights
    lm.model.save_pretrained(b, safe_serialization=True)
    lm.tokenizer.save_pretrained(b)
    shutil.copytree(a / "journal", b / "journal")
    return a, b


def _one_error(r) -> str:
    lines = [x for x in r.stderr.splitlines() if x.startswith("mobiedit: error")]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_model_folder_with_a_foreign_journal_is_refused(foreign_model, tmp_path):
    a, b = foreign_model
    weights = (b / "model.safetensors").read_bytes()
    line = _one_error(_run("edit", "--model", str(b), "--subject", "Paris", "--prompt", "{} is the capital of",
                           "--target", "Italy", "--method", "rome", "--layer", "0", "--out", str(tmp_path / "o")))
    assert "belongs to another model" in line and "base_sha256" in line and str(b / "journal") in line
    assert not (tmp_path / "o").exists()
    line = _one_error(_run("undo", str(b), "1"))
    assert "belongs to another model" in line
    line = _one_error(_run("eval", "--model", str(b), "--subject", "Paris", "--prompt", "{} is the capital of",
                           "--target", "Italy"))
    assert "belongs to another model" in line
    assert (b / "model.safetensors").read_bytes() == weights
    assert Journal.open(b / "journal").entries()[0].status == "applied"
    r = _run("undo", str(a), "1")  # its own journal: accepted
    assert r.returncode == 0, r.stderr


def _foreign_bundle(base, tmp_path):
    """(b1 with one journaled edit, b2: a same-shape bundle of other weights holding b1's journal)."""
    from mobiedit.export.bundle import load_bundle
    from mobiedit.export.ops import METHOD

    b1, b2 = tmp_path / "b1", tmp_path / "b2"
    shutil.copytree(base, b1)
    shutil.copytree(base, b2)
    bundle = load_bundle(b1)
    m, ks = bundle.manifest, bundle.keystats()
    gen = torch.Generator().manual_seed(0)
    j = bundle.journal()
    j.record({"case_id": "x"}, METHOD, m["model_family"], m["edit_layer"], m["edit_module"],
             torch.randn(m["dims"]["d_out"], generator=gen) * 0.01,
             torch.randn(m["dims"]["intermediate_size"], generator=gen) * 0.01, ks["base_weight"])
    stats = load_file(b2 / "keystats.safetensors")
    stats["base_weight"] = stats["base_weight"] * 1.01
    blob = save(stats, metadata={"module": m["edit_module"]})
    (b2 / "keystats.safetensors").write_bytes(blob)
    man = json.loads((b2 / "manifest.json").read_text())
    man["files"]["keystats.safetensors"] = {"bytes": len(blob), "sha256": hashlib.sha256(blob).hexdigest()}
    (b2 / "manifest.json").write_text(json.dumps(man))
    shutil.rmtree(b2 / "journal")
    shutil.copytree(b1 / "journal", b2 / "journal")
    return b1, b2


def test_bundle_with_a_foreign_journal_is_refused(kill_bundle_base, tmp_path):
    from mobiedit.export.bundle import load_bundle
    from mobiedit.export.ops import edit_bundle, run_bundle, undo_bundle_edit
    from mobiedit.requests import requests_from_cli

    b1, b2 = _foreign_bundle(kill_bundle_base, tmp_path)
    assert run_bundle(b1, "The capital of France is", 2) is not None  # its own bundle: fine
    before = (b2 / "journal" / "journal.jsonl").read_bytes()
    with pytest.raises(JournalError, match="another base weight.*belongs to another model") as err:
        load_bundle(b2).journal()
    assert "edit 1, field 'base_sha256'" in str(err.value) and str(b2 / "journal") in str(err.value)
    with pytest.raises(JournalError, match="belongs to another model"):
        run_bundle(b2, "The capital of France is", 2)
    with pytest.raises(JournalError, match="belongs to another model"):
        edit_bundle(b2, requests_from_cli("Paris", "{} is the capital of", "Italy"), force=True)
    with pytest.raises(JournalError, match="belongs to another model"):
        undo_bundle_edit(b2, 1)
    line = _one_error(_run("run", str(b2), "--prompt", "The capital of France is", "--max-new-tokens", "2"))
    assert "belongs to another model" in line
    assert (b2 / "journal" / "journal.jsonl").read_bytes() == before
