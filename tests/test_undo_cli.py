"""Issue 19 case 10: one ``mobiedit undo DIR ID`` for ``edit --out`` folders and for bundles
(``bundle-undo`` stays as the bundle alias). Undoing every edit of a folder gives back the
unedited weights bit for bit; unknown / undone ids and folders without a journal are named errors."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys

import torch
from safetensors.torch import load_file

from mobiedit.journal import Journal

MODULE = "model.layers.0.mlp.down_proj"


def _run(*args):
    return subprocess.run([sys.executable, "-m", "mobiedit.cli", "--quiet", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _error(r) -> str:
    lines = [x for x in r.stderr.splitlines() if x.startswith("mobiedit: error")]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def _edited_folder(src, dst, n: int = 2):
    """``src`` saved to ``dst`` with ``n`` journaled rank-one edits of MODULE baked in, as
    ``mobiedit edit --out`` writes it (journal/ beside the weights)."""
    from mobiedit.journal import apply_factors
    from mobiedit.models import load_model

    lm = load_model(src)
    weight = lm.model.get_submodule(MODULE).weight
    j = Journal.open(dst / "journal")
    gen = torch.Generator().manual_seed(0)
    for k in range(n):
        u, w = torch.randn(weight.shape[0], generator=gen), torch.randn(weight.shape[1], generator=gen)
        j.record({"case_id": f"c{k}"}, "rome", lm.family, 0, MODULE, u, w, weight.detach().clone())
        with torch.no_grad():
            weight.copy_(apply_factors(weight, u, w, lm.family.weight_out_in))
    lm.model.save_pretrained(dst, safe_serialization=True)
    lm.tokenizer.save_pretrained(dst)
    return dst


def test_undo_of_an_edit_out_folder_restores_the_weights_bit_exactly(tmp_path, tiny_llama_dir):
    folder = _edited_folder(tiny_llama_dir, tmp_path / "edited")
    orig = load_file(tiny_llama_dir / "model.safetensors")
    edited = load_file(folder / "model.safetensors")
    assert not torch.equal(edited[f"{MODULE}.weight"], orig[f"{MODULE}.weight"])
    r = _run("undo", str(folder), "1")
    assert r.returncode == 0 and "undid edit 1 (c0)" in r.stdout, r.stderr
    assert [e.status for e in Journal.open(folder / "journal").entries()] == ["undone", "applied"]
    assert "already undone" in _error(_run("undo", str(folder), "1"))
    assert "unknown" in _error(_run("undo", str(folder), "7")).lower() or "no edit 7" in _run(
        "undo", str(folder), "7").stderr
    r = _run("undo", str(folder), "2")
    assert r.returncode == 0, r.stderr
    after = load_file(folder / "model.safetensors")
    assert set(after) == set(orig)
    for name, t in orig.items():  # every parameter is the unedited model's, bit for bit
        assert torch.equal(after[name], t), name
    assert (folder / "tokenizer_config.json").is_file()  # the other files are kept


def test_undo_of_a_folder_without_a_journal_is_a_named_error(tmp_path, tiny_llama_dir):
    plain = tmp_path / "plain"
    shutil.copytree(tiny_llama_dir, plain)
    line = _error(_run("undo", str(plain), "1"))
    assert "no journal/journal.jsonl" in line and str(plain) in line
    assert "no such folder" in _error(_run("undo", str(tmp_path / "missing"), "1"))


def test_bundle_undo_and_undo_are_one_verb_on_bundles(kill_bundle_base, tmp_path):
    from mobiedit.export.bundle import load_bundle
    from mobiedit.export.ops import METHOD

    b = tmp_path / "b"
    shutil.copytree(kill_bundle_base, b)
    bundle = load_bundle(b)
    m, ks = bundle.manifest, bundle.keystats()
    j = bundle.journal()
    gen = torch.Generator().manual_seed(0)
    for k in range(2):
        j.record({"case_id": f"c{k}"}, METHOD, m["model_family"], m["edit_layer"], m["edit_module"],
                 torch.randn(m["dims"]["d_out"], generator=gen) * 0.01,
                 torch.randn(m["dims"]["intermediate_size"], generator=gen) * 0.01,
                 j.rebuild(m["edit_module"]) if k else ks["base_weight"])  # what the module holds now
    assert _run("undo", str(b), "1").returncode == 0
    r = _run("bundle-undo", str(b), "2")
    assert r.returncode == 0, r.stderr
    assert [e.status for e in Journal.open(b / "journal").entries()] == ["undone", "undone"]
