"""``mobiedit sequential --work``: a row stopped before its end continues where it stopped when
the same command runs again, and makes the row an uninterrupted run makes — the same per-edit
records, checkpoint table and undo check (:mod:`mobiedit.sequential_resume`). The row is the
projected forward-only search the held-out sequence measures (spread over two layers, rows
protect): its protected keys, both written layers and the forward model's float islands must all
come back. The stop falls after an edit was journaled but before its state was saved, the worst
place: the journal is one edit ahead and must be rewound."""
from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path

import pytest

N = 2
RECORDS = (0, 2, 4, 5)  # 2 to edit, 2 for the probe (records of tests/test_sequential_cli.py)


def _args(model, requests, cfg, out, work, extra=()) -> list[str]:
    return ["--quiet", "sequential", "--model", str(model), "--requests", str(requests), "--n", str(N),
            "--rows", f"s2rp=mobiedit:{cfg}", "--layer", "1", "--checkpoints", "1", "2", "--undo", "2",
            "--probe", "2", "--ppl-tokens", "0", "--force", "--out", str(out), "--work", str(work), *extra]


def _cli(args) -> tuple[int, str]:
    from mobiedit.cli import main

    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(args)
    return rc, buf.getvalue()


@pytest.fixture(scope="module")
def setup(small_fact_lm, tmp_path_factory):
    """The request file, the row's config and an uninterrupted run's result row."""
    from mobiedit.requests import bundled_path

    tmp = tmp_path_factory.mktemp("resume")
    req, cfg = tmp / "requests.json", tmp / "s2rp.yaml"
    records = json.loads(bundled_path("counterfact-edit-1k.json").read_text())
    req.write_text(json.dumps([records[i] for i in RECORDS]))
    # a short search (12 steps, one clamp) keeps the test quick; --force applies what it finds
    cfg.write_text("update: {spread: 2, rule: rows-protect, clamp_ladder: [4.0], key_refresh: 1}\nzo: {max_steps: 12}\n")
    rc, _ = _cli(_args(small_fact_lm, req, cfg, tmp / "whole", tmp / "whole-work"))
    assert rc == 0
    whole = json.loads((tmp / "whole" / "sequential.json").read_text())["rows"][0]
    return small_fact_lm, req, cfg, whole | {"work": str(tmp / "whole-work")}


def _same(row) -> str:
    """A row without its clocks (any field named wall…) and its work folder, as JSON (NaN equal to NaN)."""
    def strip(x):
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if not k.startswith("wall") and k != "work"}
        return [strip(v) for v in x] if isinstance(x, list) else x
    return json.dumps(strip(row), sort_keys=True)


def test_a_row_stopped_after_a_journaled_edit_resumes_to_the_uninterrupted_row(setup, tmp_path, monkeypatch):
    import mobiedit.sequential_run as sr
    from mobiedit.journal import Journal
    from mobiedit.sequential_resume import STATE_FILE, load_state

    model, req, cfg, whole = setup
    real, calls = sr.edit_step, []

    def stopping(session, r, i, force, st):
        real(session, r, i, force, st)
        calls.append(i)
        if i == 2:  # journaled, its state not yet saved
            raise KeyboardInterrupt

    monkeypatch.setattr(sr, "edit_step", stopping)
    args = _args(model, req, cfg, tmp_path / "out", tmp_path / "work")
    rc, _ = _cli(args)  # the CLI says "interrupted" and exits non-zero
    assert rc != 0 and calls == [1, 2]
    row_dir = tmp_path / "work" / "s2rp"
    journal = Journal.open(row_dir / "journal")
    stopped = json.loads((tmp_path / "out" / "sequential.json").read_text())["rows"][0]
    saved = load_state(row_dir, stopped["identity"])
    assert saved.done == 1 and saved.entries == 2 < len(journal.entries()) == 4  # two layers per edit
    assert stopped["partial"] and [r["edits"] for r in stopped["table"]] == [1]

    def counting(session, r, i, force, st):
        real(session, r, i, force, st)
        calls.append(i)

    monkeypatch.setattr(sr, "edit_step", counting)
    calls.clear()
    rc, printed = _cli(args)
    assert rc == 0 and calls == [2]  # edit 1 is not searched again
    resumed = json.loads((tmp_path / "out" / "sequential.json").read_text())["rows"][0]
    assert _same(resumed) == _same(whole)
    assert resumed["undo"]["bit_exact"] == 2 and resumed["undo"]["undo_all_restores_unedited_model"]
    assert (row_dir / STATE_FILE).is_file() and "s2rp" in printed


def test_a_state_of_other_settings_or_a_folder_without_one_is_refused(setup, tmp_path, capsys):
    model, req, cfg, _ = setup
    work = tmp_path / "work"
    (work / "s2rp").mkdir(parents=True)
    (work / "s2rp" / "notes.txt").write_text("x")
    rc, _ = _cli(_args(model, req, cfg, tmp_path / "out", work))
    err = capsys.readouterr().err
    assert rc == 2 and "--work" in err and "holds no resume.safetensors" in err
    (work / "s2rp" / "notes.txt").unlink()
    from mobiedit.sequential_resume import STATE_FILE

    (work / "s2rp" / STATE_FILE).write_bytes(b"not safetensors")
    rc, _ = _cli(_args(model, req, cfg, tmp_path / "out", work))
    err = capsys.readouterr().err
    assert rc == 2 and "cannot read the row's resume state" in err and "Traceback" not in err


def test_a_state_saved_by_a_row_of_another_seed_is_refused(setup, tmp_path, capsys):
    model, req, cfg, whole = setup
    work = Path(whole["work"])  # the uninterrupted run's folder: its state is the seed-0 row's
    rc, _ = _cli(_args(model, req, cfg, tmp_path / "out", work, ["--seed", "1"]))
    err = capsys.readouterr().err
    assert rc == 2 and "other settings" in err and "--work" in err


def test_rewinding_a_journal_past_its_end_is_refused_and_changes_nothing(tmp_path):
    from mobiedit.errors import JournalError
    from mobiedit.journal import JOURNAL_FILE, Journal

    journal = Journal.open(tmp_path / "journal")
    with pytest.raises(JournalError, match="cannot rewind to 1 entries: the journal holds 0") as e:
        journal.rewind(1)
    assert JOURNAL_FILE in str(e.value) and (tmp_path / "journal" / JOURNAL_FILE).read_text() == ""


def test_status_reads_a_finished_and_a_stopped_row_without_loading_a_model(setup, tmp_path):
    from types import SimpleNamespace

    from mobiedit.sequential_resume import save_state

    _, _, _, whole = setup
    rc, printed = _cli(["sequential-status", whole["work"]])
    assert rc == 0 and "row s2rp: mobiedit" in printed and f"2 of {N} edits done" in printed and "finished" in printed
    rc, printed = _cli(["sequential-status", whole["work"], "--json"])
    (row,) = json.loads(printed)
    assert (row["done"], row["n"], row["finished"]) == (2, 2, True)
    assert row["applied"] == sum(e["applied"] for e in whole["edits"]) and row["rows"] == whole["table"]
    # a row stopped after its first edit: the rate is that edit's wall time, one edit is left
    first = whole["edits"][0]
    st = SimpleNamespace(records=[first], rows=whole["table"][:1],
                         tracker=SimpleNamespace(w_rows=[], keys=[], own_change=[]))
    (tmp_path / "w" / "s2rp").mkdir(parents=True)
    save_state(tmp_path / "w" / "s2rp", whole["identity"], 1, 2, st, {}, 42.0)
    rc, printed = _cli(["sequential-status", str(tmp_path / "w"), "--json"])
    (row,) = json.loads(printed)
    assert rc == 0 and (row["done"], row["finished"], row["elapsed_s"]) == (1, False, 42.0)
    assert row["rate_s_per_edit"] == row["remaining_s"] == first["wall_s"]
    assert row["recent"][0]["case_id"] == first["case_id"]
    rc, printed = _cli(["sequential-status", str(tmp_path / "w")])
    assert f"1 of {N} edits done" in printed and "next checkpoint at 2" in printed


def test_status_names_the_folder_when_there_is_no_readable_state(tmp_path, capsys):
    from mobiedit.sequential_resume import STATE_FILE

    rc, _ = _cli(["sequential-status", str(tmp_path / "absent")])
    assert rc == 2 and "is not a folder" in capsys.readouterr().err
    (tmp_path / "row").mkdir()
    rc, _ = _cli(["sequential-status", str(tmp_path)])
    assert rc == 2 and "no row state" in capsys.readouterr().err
    (tmp_path / "row" / STATE_FILE).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}")
    rc, _ = _cli(["sequential-status", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "cannot read the row's resume state" in err and "Traceback" not in err
    from safetensors.torch import save

    (tmp_path / "row" / STATE_FILE).write_bytes(save({}, metadata={"state": json.dumps({"version": 1, "done": 3})}))
    rc, _ = _cli(["sequential-status", str(tmp_path)])
    err = capsys.readouterr().err
    assert rc == 2 and "lacks or mistypes a field" in err and "WORK" in err and "Traceback" not in err
