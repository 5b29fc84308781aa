"""``tools/merge_rowlogs.py``: slices of a bench row run in scratch folders merged into the row's
log — new records appended in order, a seeded copy's records accepted, anything else refused
without writing."""
from __future__ import annotations

import json

from tools.merge_rowlogs import main

IDENT = json.dumps({"identity": {"row": "fzoo-stopw", "config": {"layer": 2}}})


def _log(path, cases, ident=IDENT, evals=100, torn=False):
    lines = [ident] + [json.dumps({"case_id": c, "loss_evals": evals}) for c in cases]
    path.write_text("\n".join(lines) + "\n" + ('{"case_id": "cut' if torn else ""))
    return path


def test_new_records_of_seeded_slices_are_appended_in_order(tmp_path, capsys):
    dest = _log(tmp_path / "dest.jsonl", ["a", "b"])
    one = _log(tmp_path / "one.jsonl", ["a", "b", "c", "d"], torn=True)
    two = _log(tmp_path / "two.jsonl", ["a", "b", "e"])
    assert main([str(dest), str(one), str(two)]) == 0
    cases = [json.loads(ln).get("case_id") for ln in dest.read_text().splitlines()]
    assert cases == [None, "a", "b", "c", "d", "e"]
    assert "3 records added" in capsys.readouterr().out
    assert main([str(dest), str(one)]) == 0 and dest.read_text().count("\n") == 6  # nothing new twice


def test_another_identity_or_a_different_record_is_refused_and_nothing_written(tmp_path, capsys):
    dest = _log(tmp_path / "dest.jsonl", ["a"])
    before = dest.read_text()
    other = _log(tmp_path / "other.jsonl", ["b"], ident=json.dumps({"identity": {"row": "rome"}}))
    assert main([str(dest), str(other)]) == 1 and "another identity" in capsys.readouterr().err
    good = _log(tmp_path / "good.jsonl", ["c"])
    changed = _log(tmp_path / "changed.jsonl", ["a"], evals=7)
    assert main([str(dest), str(good), str(changed)]) == 1
    assert "request a differs" in capsys.readouterr().err and dest.read_text() == before
