"""Issue 19 cases 1–2 (and the `--out` symlink of case 8): `--out` never destroys what it was not
asked to replace. One gate, mobiedit.outputs.check_output_dir, used by `edit`, `quantize` and
`export` before any long work."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from mobiedit.errors import ConfigError
from mobiedit.outputs import MARKER, check_output_dir, mark_output, output_kind


def _run(*args):
    return subprocess.run([sys.executable, "-m", "mobiedit.cli", "--quiet", *args], capture_output=True, text=True,
                          timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})


def _req(tmp_path) -> Path:
    f = tmp_path / "req.json"
    f.write_text(json.dumps([{"case_id": 1, "prompt": "Paris is the capital of", "subject": "Paris",
                              "target_new": "Italy", "ground_truth": "France", "rephrase_prompt": "Paris is in",
                              "locality_prompt": "Rome is in", "locality_ground_truth": "Italy"}]))
    return f


def _edit(model, req, out, *extra):
    return _run("edit", "--model", str(model), "--requests", str(req), "--method", "rome", "--layer", "0",
                "--force", "--out", str(out), *extra)


def _one_error(r) -> str:
    lines = [x for x in r.stderr.splitlines() if x.startswith("mobiedit: error")]
    assert r.returncode == 2 and len(lines) == 1 and "Traceback" not in r.stderr, r.stderr
    return lines[0]


def test_edit_refuses_a_non_empty_folder_it_did_not_write(tmp_path, tiny_llama_dir):
    out = tmp_path / "x" / "p"
    out.mkdir(parents=True)
    (out / "thesis.txt").write_text("t")
    line = _one_error(_edit(tiny_llama_dir, _req(tmp_path), out))
    assert f"--out {out}" in line and "--overwrite" in line and "not written by mobiedit" in line
    assert (out / "thesis.txt").read_text() == "t" and sorted(os.listdir(out)) == ["thesis.txt"]
    assert not [n for n in os.listdir(out.parent) if n.startswith(".")]


def test_out_that_contains_the_input_model_is_refused_even_with_overwrite(tmp_path, tiny_llama_dir):
    model = tmp_path / "x" / "nest" / "model"
    shutil.copytree(tiny_llama_dir, model)
    before = {p.name: p.read_bytes() for p in model.iterdir()}
    for extra in ((), ("--overwrite",)):
        line = _one_error(_edit(model, _req(tmp_path), model.parent, *extra))
        assert "contains the input" in line and str(model) in line
        line = _one_error(_edit(model, _req(tmp_path), model, *extra))
        assert "is the input" in line
    assert {p.name: p.read_bytes() for p in model.iterdir()} == before


def test_out_that_contains_the_request_file_is_refused(tmp_path, tiny_llama_dir):
    folder = tmp_path / "reqs"
    folder.mkdir()
    req = _req(folder)
    line = _one_error(_edit(tiny_llama_dir, req, folder, "--overwrite"))
    assert "contains the input" in line and req.is_file()


def test_out_naming_a_file_or_a_symlink_is_a_named_error(tmp_path, tiny_llama_dir):
    f = tmp_path / "notes.txt"
    f.write_text("keep me")
    line = _one_error(_edit(tiny_llama_dir, _req(tmp_path), f, "--overwrite"))
    assert f"--out {f}" in line and "is a file" in line
    assert f.read_text() == "keep me" and f.is_file()
    target = tmp_path / "real"
    target.mkdir()
    link = tmp_path / "link"
    link.symlink_to(target)
    line = _one_error(_edit(tiny_llama_dir, _req(tmp_path), link))
    assert "symbolic link" in line and link.is_symlink() and os.listdir(target) == []
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def test_one_gate_markers_and_overwrite(tmp_path):
    """Previous outputs of the same command are replaced; of another command only with overwrite;
    folders written before the marker existed are recognised by their own files."""
    inp = tmp_path / "model"
    inp.mkdir()
    for kind in ("edit", "quantize", "bundle"):
        out = tmp_path / f"out_{kind}"
        out.mkdir()
        mark_output(out, kind)
        (out / "weights").write_text("w")
        assert output_kind(out) == kind
        assert check_output_dir(out, kind, [inp]) == out
        other = "bundle" if kind != "bundle" else "edit"
        with pytest.raises(ConfigError, match="--overwrite"):
            check_output_dir(out, other, [inp])
        check_output_dir(out, other, [inp], overwrite=True)
    legacy_edit = tmp_path / "legacy_edit"
    (legacy_edit / "journal").mkdir(parents=True)
    (legacy_edit / "journal" / "journal.jsonl").write_text("")
    (legacy_edit / "config.json").write_text("{}")
    legacy_bundle = tmp_path / "legacy_bundle"
    legacy_bundle.mkdir()
    (legacy_bundle / "manifest.json").write_text(json.dumps({"created_by": "mobiedit 0.1.0"}))
    assert output_kind(legacy_edit) == "edit" and output_kind(legacy_bundle) == "bundle"
    empty = tmp_path / "empty"
    empty.mkdir()
    for kind in ("edit", "quantize", "bundle"):
        check_output_dir(empty, kind, [inp])
        check_output_dir(tmp_path / "new" / "deep", kind, [inp])


def test_a_bundle_whose_journal_holds_edits_is_not_replaced_without_overwrite(tmp_path):
    """A bundle is edited in place after export, so its journal is the only copy of those edits:
    exporting over it (allowed for a fresh bundle) needs --overwrite once it holds any (session 35)."""
    inp = tmp_path / "model"
    inp.mkdir()
    out = tmp_path / "bundle"
    (out / "journal").mkdir(parents=True)
    mark_output(out, "bundle")
    (out / "journal" / "journal.jsonl").write_text("")
    assert check_output_dir(out, "bundle", [inp]) == out  # exported, never edited
    (out / "journal" / "journal.jsonl").write_text('{"id": 1}\n')
    with pytest.raises(ConfigError) as e:
        check_output_dir(out, "bundle", [inp])
    assert "journal holds edits" in str(e.value) and "--overwrite" in e.value.fix
    assert check_output_dir(out, "bundle", [inp], overwrite=True) == out


def test_quantize_and_export_use_the_same_gate_before_any_work(tmp_path, tiny_llama_dir, monkeypatch):
    from mobiedit.export import bundle as B
    from mobiedit.forward.quant import QuantConfig
    from mobiedit.forward.quant_save import save_quantized

    def never(*a, **k):
        raise AssertionError("the long work started")

    monkeypatch.setattr("mobiedit.export.pipeline.prepare", never)
    out = tmp_path / "thesis"
    out.mkdir()
    (out / "thesis.txt").write_text("t")
    with pytest.raises(ConfigError, match="--overwrite"):
        save_quantized(tiny_llama_dir, out, 0, QuantConfig("w8a16"))
    with pytest.raises(ConfigError, match="--overwrite"):
        B.export_bundle(tiny_llama_dir, out)
    with pytest.raises(ConfigError, match="is the input"):
        save_quantized(tiny_llama_dir, tiny_llama_dir, 0, QuantConfig("w8a16"), overwrite=True)
    with pytest.raises(ConfigError, match="contains the input"):
        B.export_bundle(tiny_llama_dir, tiny_llama_dir.parent, overwrite=True)
    fit = out / "fit.json"
    fit.write_text("[]")
    with pytest.raises(ConfigError, match="contains the input"):
        B.export_bundle(tiny_llama_dir, out, overwrite=True, inputs=(fit,))
    assert (out / "thesis.txt").read_text() == "t"


def test_edit_with_overwrite_replaces_the_folder_and_marks_it(tmp_path, tiny_llama_dir):
    out = tmp_path / "p"
    out.mkdir()
    (out / "thesis.txt").write_text("t")
    r = _edit(tiny_llama_dir, _req(tmp_path), out, "--overwrite", "--limit", "1")
    assert r.returncode == 0, r.stderr[-2000:]
    assert not (out / "thesis.txt").exists() and (out / MARKER).is_file() and output_kind(out) == "edit"
    assert (out / "journal" / "journal.jsonl").is_file()
