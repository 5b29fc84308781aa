"""``mobiedit sequential`` (issue 16, deliverables 4 and 5): several rows in one run, each a
sequential session from the unedited model; checkpoint table with held-out perplexity, per-edit
interference, JSON + PNG, resume by identity, and its errors. One small run on the small fact LM
(3 edits, 2 rows), shared by the tests of this file."""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

N = 3
#: bundled CounterFact records: 3 to edit (ones the small fact LM's ROME edit lands at the first
#: clamp, so the ladder row makes one try each: the run stays short), then 2 for the probe
RECORDS = (0, 2, 3, 4, 5)


def _args(model, requests, out, work=None, extra=()) -> list[str]:
    """The run's arguments (after the verb): 3 edits, checkpoints 1 and 3, rows rome-plain and rome."""
    args = ["--model", str(model), "--requests", str(requests), "--n", str(N), "--rows", "rome-plain,rome",
            "--checkpoints", "1", "3", "--undo", "1", "--probe", "2", "--ppl-tokens", "512", "--out", str(out), *extra]
    return args + (["--work", str(work)] if work else [])


@dataclass
class Run:
    """The shared CLI run: exit code, stdout, the result file's content and the folders."""

    rc: int
    printed: str
    doc: dict
    out: Path
    work: Path
    requests: Path


@pytest.fixture(scope="module")
def run(small_fact_lm, tmp_path_factory) -> Run:
    """``mobiedit --quiet sequential ...`` in-process on the small fact LM (about 15 s)."""
    import contextlib
    import io

    from mobiedit.cli import main
    from mobiedit.requests import bundled_path

    tmp = tmp_path_factory.mktemp("seq")
    out, work, req = tmp / "out", tmp / "work", tmp / "requests.json"
    records = json.loads(bundled_path("counterfact-edit-1k.json").read_text())
    req.write_text(json.dumps([records[i] for i in RECORDS]))
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = main(["--quiet", "sequential", *_args(small_fact_lm, req, out, work)])
    return Run(rc, buf.getvalue(), json.loads((out / "sequential.json").read_text()), out, work, req)


def test_both_rows_are_written_with_their_checkpoints_and_configs(run):
    from mobiedit.ladder import SEQUENTIAL_LADDER

    assert run.rc == 0, run.printed
    assert [r["row"] for r in run.doc["rows"]] == ["rome-plain", "rome"] == run.doc["run_rows"]
    for res in run.doc["rows"]:
        assert [t["edits"] for t in res["table"]] == [1, 3]
        assert res["undo"]["random_undos"] == 1 and res["undo"]["bit_exact"] == 1
        assert res["undo"]["undo_all_restores_unedited_model"]
        assert res["perplexity_unedited"] > 1.0
        for t in res["table"]:
            assert 0.0 <= t["efficacy_acc"] <= 100.0 and 0.0 <= t["probe_true_acc"] <= 100.0
            assert t["perplexity_change_pct"] == pytest.approx(100.0 * (t["perplexity"] / res["perplexity_unedited"] - 1))
            assert t["window"]["last"] == t["edits"]
        assert res["identity"]["n"] == N and res["identity"]["checkpoints"] == [1, 3]
    plain, ladder = (r["config"] for r in run.doc["rows"])
    clamp = plain["objective"]["clamp_norm_factor"]
    assert plain["update"]["clamp_ladder"] == [clamp]  # no ladder: the objective's clamp only
    assert ladder["update"]["clamp_ladder"] == pytest.approx([f * clamp for f in SEQUENTIAL_LADDER])
    assert [t["window"]["first"] for t in run.doc["rows"][0]["table"]] == [1, 2]


def test_printed_tables_show_each_row_its_checkpoints_and_the_undo(run):
    assert "row rome-plain: rome" in run.printed and "row rome: rome" in run.printed
    assert run.printed.count("undo: 1/1 random undos bit-exact") == 2
    assert "ppl %" in run.printed and "moves max" in run.printed
    table = [ln.split() for ln in run.printed.splitlines()]
    assert sum(1 for t in table if t[:1] == ["3"] and len(t) == 11) == 2  # the 3-edit line of each row
    lines = run.printed.splitlines()
    head = next(i for i, ln in enumerate(lines) if ln.startswith("row ") and ln.rstrip().endswith("wall s"))
    assert [ln.split()[0] for ln in lines[head + 1:head + 3]] == ["rome-plain", "rome"]


def test_update_norms_match_the_journaled_factors_and_the_weight_drift(run, small_fact_lm):
    """update_norm = ‖u‖‖w‖ of the factors the journal stored, edit by edit; after one applied edit
    the relative drift is that norm over ‖W₀‖."""
    from mobiedit.journal import Journal
    from mobiedit.models import load_model

    for res in run.doc["rows"]:
        applied = [e for e in res["edits"] if e["applied"]]
        journal = Journal.open(run.work / res["row"] / "journal", readonly=True)
        entries = journal.entries()
        assert len(entries) == len(applied) >= 2
        for rec, entry in zip(applied, entries):
            u, w = journal.load_factors(entry)
            assert rec["update_norm"] == pytest.approx(float(u.double().norm() * w.double().norm()), rel=1e-9)
        first = res["edits"][0]
        if first["applied"]:
            lm = load_model(small_fact_lm)
            w0 = lm.model.get_submodule(lm.family.mlp_out.format(res["layer"])).weight.detach()
            assert res["table"][0]["weight_drift"] == pytest.approx(first["update_norm"] / float(w0.double().norm()),
                                                                   rel=1e-3)


def test_interference_fields_are_none_without_earlier_edits_and_bounded_after(run):
    for res in run.doc["rows"]:
        recs = res["edits"]
        assert [r["edit"] for r in recs] == [1, 2, 3]
        first_applied = next(r for r in recs if r["applied"])
        assert first_applied["key_overlap_max"] is None and first_applied["moves_earlier_max"] is None
        later = [r for r in recs if r["applied"] and r is not first_applied]
        assert later
        for r in later:
            assert 0.0 <= r["key_overlap_max"] <= 1.0 + 1e-12
            assert 0.0 <= r["moves_earlier_mean"] <= r["moves_earlier_max"]
            assert r["update_norm"] > 0 and r["wall_s"] > 0 and r["loss_evals"] > 0
        assert all(r["clamp_norm_factor"] in res["config"]["update"]["clamp_ladder"] for r in recs)
        win = res["table"][-1]["window"]
        norms = [r["update_norm"] for r in recs[1:] if r["applied"]]
        assert win["update_norm_max"] == pytest.approx(max(norms))


def test_the_interference_arithmetic_on_known_vectors():
    """Two edits in a 2-d space: ΔW₁ = e₁e₁ᵀ (key e₁), ΔW₂ = (0,2)(½,½)ᵀ (key e₂): cos 0; edit 2
    moves edit 1's output by ‖u₂‖·|w₂·e₁| = 1, as much as edit 1 wrote there (1)."""
    from mobiedit.sequential_interference import InterferenceTracker, window_summary

    t = InterferenceTracker()
    e1, e2 = torch.tensor([1.0, 0.0]), torch.tensor([0.0, 1.0])
    first = t.measure(e1, e1, e1)
    assert first == {"update_norm": 1.0, "key_overlap_max": None, "moves_earlier_mean": None, "moves_earlier_max": None}
    t.add(e1, e1, e1)
    second = t.measure(torch.tensor([0.0, 2.0]), torch.tensor([0.5, 0.5]), e2)
    assert second["update_norm"] == pytest.approx(2 * math.sqrt(0.5))
    assert second["key_overlap_max"] == pytest.approx(0.0)
    assert second["moves_earlier_max"] == pytest.approx(1.0) == second["moves_earlier_mean"]
    third = t.measure(torch.tensor([3.0, 0.0]), torch.tensor([0.0, 1.0]), torch.tensor([1.0, 1.0]))
    assert third["key_overlap_max"] == pytest.approx(math.sqrt(0.5)) and third["moves_earlier_max"] == 0.0
    recs = [{"edit": 1, "applied": True, "loss_evals": 4, "wall_s": 1.0, "status": "SUCCESS_CHECK", **first},
            {"edit": 2, "applied": True, "loss_evals": 8, "wall_s": 3.0, "status": "MAX_STEPS", **second},
            {"edit": 3, "applied": False, "loss_evals": 6, "wall_s": 2.0, "status": "PLATEAU", **third}]
    win = window_summary(recs, 2, 3)
    assert (win["edits"], win["applied"], win["loss_evals_median"], win["wall_s_mean"]) == (2, 1, 7.0, 2.5)
    assert win["moves_earlier_max_max"] == pytest.approx(1.0) and win["update_norm_max"] == pytest.approx(2 * math.sqrt(0.5))
    assert (win["at_budget"], win["at_plateau"]) == (1, 1)
    assert window_summary(recs, 1, 1)["key_overlap_max_max"] is None
    assert (window_summary(recs, 1, 1)["at_budget"], window_summary(recs, 1, 1)["at_plateau"]) == (0, 0)


def test_the_figure_is_a_png(run):
    data = (run.out / "sequential.png").read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    assert width > 800 and height > 500


def test_a_rerun_reuses_the_saved_rows_and_a_changed_run_does_not(run, small_fact_lm, monkeypatch, capsys):
    """Same arguments (through ``python -m mobiedit.sequential``'s parser): no model is opened, the
    rows are reported as reused; another seed is another identity and runs again."""
    import mobiedit.sequential_run as sr
    from mobiedit.sequential import main

    class Opened(Exception):
        pass

    def refuse(_settings):
        raise Opened

    monkeypatch.setattr(sr, "open_baseline", refuse)
    assert main([*_args(small_fact_lm, run.requests, run.out), "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "row rome-plain: reused" in printed and "row rome: reused" in printed
    assert json.loads((run.out / "sequential.json").read_text())["rows"] == run.doc["rows"]
    with pytest.raises(Opened):
        main([*_args(small_fact_lm, run.requests, run.out, extra=("--seed", "1")), "--quiet"])


def test_a_saved_row_whose_undo_failed_makes_the_exit_code_1(run, small_fact_lm, tmp_path, capsys):
    from mobiedit.cli import main

    doc = json.loads(json.dumps(run.doc))  # a copy: the other tests read the run's
    doc["rows"][1]["undo"]["bit_exact"] = 0
    (tmp_path / "sequential.json").write_text(json.dumps(doc))
    assert main(["--quiet", "sequential", *_args(small_fact_lm, run.requests, tmp_path)]) == 1
    assert "undo: 0/1 random undos" in capsys.readouterr().out


@pytest.mark.parametrize("rows, named", [("rome,nope", "'nope'"), ("x=sgd", "'sgd'"), ("rome,rome", "twice"),
                                         ("rome@0", "batch size"), ("rome@x", "batch size")])
def test_a_bad_rows_value_is_one_line_naming_rows(rows, named, tmp_path, capsys):
    from mobiedit.cli import main

    assert main(["--quiet", "sequential", "--rows", rows, "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("mobiedit: error: --rows:") and named in err[0], err
    assert "rome-plain" in err[0]  # the valid names are listed
    assert not (tmp_path / "sequential.json").exists()


def test_a_batch_row_solves_its_edits_together_and_undoes_bit_exactly(run, small_fact_lm, tmp_path, capsys):
    """``rome@3``: the 3 edits searched alone, one solve (mobiedit.batch), one checkpoint at its end;
    every edit journaled, the undo check bit-exact; the row's identity carries the batch size."""
    from mobiedit.cli import main
    from mobiedit.sequential_rows import parse_row

    assert parse_row("rome@3").batch == 3 and parse_row("x=rome@2").name == "x@2"
    args = _args(small_fact_lm, run.requests, tmp_path / "b")
    args[args.index("rome-plain,rome")] = "rome@3"
    assert main(["--quiet", "sequential", *args]) == 0
    (row,) = json.loads((tmp_path / "b" / "sequential.json").read_text())["rows"]
    assert row["row"] == "rome@3" and row["identity"]["batch"] == 3
    assert [r["batch"] for r in row["edits"]] == [0, 0, 0] and [t["edits"] for t in row["table"]] == [3]
    assert row["undo"]["bit_exact"] == row["undo"]["random_undos"] == 1
    applied = [r for r in row["edits"] if r["applied"]]
    assert applied and applied[0]["moves_earlier_max"] is None and all(r["moves_earlier_max"] is not None for r in applied[1:])
    assert "rome@3" in capsys.readouterr().out


def test_offset_edits_a_later_slice_and_is_part_of_the_identity(run, small_fact_lm, tmp_path, capsys):
    """``--offset 2``: the edits are the file's requests 3 and 4 (the probe the one after them), the
    row's identity records the offset; an offset that leaves too few requests, or a negative one,
    is one line naming ``--offset`` and writes nothing."""
    from mobiedit.cli import main

    args = _args(small_fact_lm, run.requests, tmp_path / "o")
    args[args.index("--n") + 1] = "2"
    args[args.index("rome-plain,rome")] = "rome-plain"
    args[args.index("--probe") + 1] = "1"
    args[args.index("--checkpoints") + 1: args.index("--checkpoints") + 3] = ["2"]
    assert main(["--quiet", "sequential", *args, "--offset", "2"]) == 0
    (row,) = json.loads((tmp_path / "o" / "sequential.json").read_text())["rows"]
    records = json.loads(run.requests.read_text())
    assert [r["case_id"] for r in row["edits"]] == [str(records[i]["case_id"]) for i in (2, 3)]
    assert row["identity"]["offset"] == 2 and "offset" not in run.doc["rows"][0]["identity"]
    capsys.readouterr()
    for bad in ("4", "-1"):
        assert main(["--quiet", "sequential", *args, "--offset", bad, "--out", str(tmp_path / bad)]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and "--offset" in err[0], err
        assert not (tmp_path / bad).exists()


def test_each_checkpoint_is_printed_and_saved_as_it_lands(run, tmp_path, capsys):
    """A checkpoint before the row's end is printed at once and saved as a ``partial`` row (a run
    stopped there keeps it); the finished row replaces it, and a partial row is never reused."""
    from mobiedit.sequential import _checkpoint_saver
    from mobiedit.sequential_report import load_saved, reusable

    lines = [ln for ln in run.printed.splitlines() if ln.startswith(("rome-plain: edits 1,", "rome: edits 1,"))]
    assert len(lines) == 2 and all("eff acc " in ln and "probe true " in ln for ln in lines)
    assert not any(r.get("partial") for r in run.doc["rows"])
    done = run.doc["rows"][1]
    path = tmp_path / "sequential.json"
    partial = {k: v for k, v in done.items() if k not in ("row", "identity")} | {
        "undo": None, "partial": True, "table": done["table"][:1]}
    _checkpoint_saver("rome", done["identity"], path, {"n": N}, [run.doc["rows"][0]], {})(partial)
    assert capsys.readouterr().out.startswith("rome: edits 1, applied ")
    saved = load_saved(path)
    assert list(saved) == ["rome-plain", "rome"] and saved["rome"]["partial"] is True
    assert saved["rome"]["table"] == done["table"][:1]
    assert reusable(saved["rome-plain"], run.doc["rows"][0]["identity"])
    assert not reusable(saved["rome"], done["identity"])  # same identity, but not finished
