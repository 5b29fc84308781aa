"""Tests of mobiedit.journal's reads: tampered or missing files, malformed entries and lines, a
torn last line, foreign folders, checked copies."""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

import mobiedit.journal as journal_mod
from mobiedit.errors import JournalError
from mobiedit.journal import BASE_FILE, JOURNAL_FILE, Journal, factors_name, tensor_sha256
from journal_kit import LLAMA, edited_journal, same_state, snapshot, tiny_llama


@pytest.fixture
def edited(tmp_path):
    return edited_journal(tmp_path / "j")


# ----------------------------------------------------------------------------- reading validates

def rewrite_line(folder: Path, index: int, change) -> None:
    path = folder / JOURNAL_FILE
    lines = path.read_text().splitlines()
    obj = json.loads(lines[index])
    change(obj)
    lines[index] = json.dumps(obj)
    path.write_text("\n".join(lines) + "\n")


def test_tampered_factors_detected_at_open_and_use(edited):
    j, model, _, _ = edited
    path = j.folder / factors_name(3)
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(JournalError, match=r"edit 3, field 'sha256'.*tampered"):
        Journal.open(j.folder)
    state = snapshot(model)
    with pytest.raises(JournalError, match="edit 3, field 'sha256'"):
        j.undo(4, model, LLAMA)  # opened before tampering: checked again on use
    assert same_state(model, state) and j.entry(4).active  # nothing changed
    assert json.loads((j.folder / JOURNAL_FILE).read_text().splitlines()[3])["status"] == "applied"
    path.unlink()
    with pytest.raises(JournalError, match="edit 3, field 'factors'.*unreadable"):
        Journal.open(j.folder)


def test_factors_shape_mismatch_detected(edited):
    j, model, _, _ = edited
    path = j.folder / factors_name(2)
    path.write_bytes(journal_mod.st_save({"u": torch.zeros(32), "w": torch.zeros(65)}))
    rewrite_line(j.folder, 1, lambda o: o.update(sha256=hashlib.sha256(path.read_bytes()).hexdigest()))
    j2 = Journal.open(j.folder)
    with pytest.raises(JournalError, match=r"edit 2, field 'w'.*expected float32\[64\]"):
        j2.apply_all(tiny_llama(), LLAMA)


def test_journal_entry_shape_mismatch_with_module(edited):
    j, model, _, _ = edited
    for i in range(4):
        rewrite_line(j.folder, i, lambda o: o.update(d_out=16) if o["layer"] == 0 else None)
    j2 = Journal.open(j.folder)
    with pytest.raises(JournalError, match=r"edit 2, field 'module'.*edit expects \[16, 64\]"):
        j2.bake(tiny_llama(), LLAMA)


def test_base_file_tampered(edited):
    j, model, _, _ = edited
    tensors = load_file(str(j.folder / BASE_FILE))
    tensors["model.layers.0.mlp.down_proj"][0, 0] += 1
    save_file(tensors, str(j.folder / BASE_FILE))
    with pytest.raises(JournalError, match="field 'base_sha256'"):
        j.undo(2, model, LLAMA)
    (j.folder / BASE_FILE).unlink()
    with pytest.raises(JournalError, match="cannot read base weight"):
        Journal.open(j.folder).bake(model, LLAMA)


BAD_LINES = [
    (lambda o: o.pop("sha256"), "line 2 (edit 2), field 'sha256': missing field"),
    (lambda o: o.update(layer="0"), "line 2 (edit 2), field 'layer': must be int"),
    (lambda o: o.update(weight_out_in=1), "field 'weight_out_in': must be bool"),
    (lambda o: o.update(status="maybe"), "field 'status'"),
    (lambda o: o.update(factors="../../etc/passwd"), "field 'factors'"),
    (lambda o: o.update(id=1, factors=factors_name(1)), "line 2, field 'id': id 1 does not follow 1"),
    (lambda o: o.update(sha256="XYZ"), "field 'sha256'"),
    (lambda o: o.update(version=99), "field 'version'"),
    (lambda o: o.update(surprise=1), "field 'surprise'"),
    (lambda o: o.update(metrics=[1]), "field 'metrics': must be dict"),
    (lambda o: o.update(id=True), "field 'id'"),
    (lambda o: o.update(d_in=65, module="model.layers.1.mlp.down_proj"), "differs from edit 1"),
    (lambda o: o.update(config={"case_id": "\ud800"}), "lone surrogate"),  # found by the fuzz test
]


@pytest.mark.parametrize("change,expect", BAD_LINES)
def test_malformed_entry_fields(edited, change, expect):
    j = edited[0]
    rewrite_line(j.folder, 1, change)
    with pytest.raises(JournalError) as ei:
        Journal.open(j.folder)
    assert expect in str(ei.value) and JOURNAL_FILE in str(ei.value)


@pytest.mark.parametrize("text,expect", [
    ('{"id": 1', "line 1: last line has no newline"),
    ('{"id": 1\n', "line 1: malformed JSON"),
    ("[1]\n", "line 1: line is a JSON list"),
    ("\n", "line 1: malformed JSON"),
    ('{"id": 1}\n', "line 1 (edit 1), field 'request': missing field"),
])
def test_malformed_journal_lines(tmp_path, text, expect):
    folder = tmp_path / "j"
    folder.mkdir()
    (folder / JOURNAL_FILE).write_text(text)
    with pytest.raises(JournalError) as ei:
        Journal.open(folder)
    assert expect in str(ei.value)


def test_torn_last_line_detected(edited):
    j = edited[0]
    path = j.folder / JOURNAL_FILE
    text = path.read_text()
    path.write_text(text[:-20])
    with pytest.raises(JournalError, match="line 4.*no newline"):
        Journal.open(j.folder)


def test_open_creates_and_refuses_foreign_folder(tmp_path):
    j = Journal.open(tmp_path / "new" / "j")
    assert (tmp_path / "new" / "j" / JOURNAL_FILE).read_text() == "" and j.entries() == []
    assert Journal.open(tmp_path / "new" / "j").entries() == []
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(JournalError, match="no journal.jsonl in a non-empty folder"):
        Journal.open(tmp_path / "model")
    assert sorted(p.name for p in (tmp_path / "model").iterdir()) == ["config.json"]


def test_copy_to_skips_orphans_and_checks(edited, tmp_path):
    j = edited[0]
    (j.folder / factors_name(9)).write_bytes(b"orphan")
    dest = j.copy_to(tmp_path / "copy")
    assert sorted(p.name for p in dest.iterdir()) == sorted(
        [JOURNAL_FILE, BASE_FILE] + [factors_name(i) for i in (1, 2, 3, 4)])
    (j.folder / factors_name(1)).write_bytes(b"x")
    with pytest.raises(JournalError, match="edit 1"):
        j.copy_to(tmp_path / "copy2")
    assert not (tmp_path / "copy2").exists()


def test_tensor_sha256_distinguishes_dtype_and_shape():
    t = torch.zeros(2, 3)
    assert tensor_sha256(t) == tensor_sha256(t.clone())
    assert tensor_sha256(t) != tensor_sha256(t.reshape(3, 2))
    assert tensor_sha256(t) != tensor_sha256(t.to(torch.float64))
