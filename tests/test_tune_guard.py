"""``mobiedit tune``'s success guard: a candidate that scores higher by failing more edits than the
current settings is not chosen (``--max-success-drop``, default 0 points)."""
from __future__ import annotations

import json

import pytest

from mobiedit.tune import best_index, keeps_success


def _row(score, succ, ppl=0.1):
    return {"score": score, "success_rate": succ, "perplexity_change_pct": ppl}


def test_best_index_with_the_success_guard():
    table = [_row(60.0, 100.0), _row(70.0, 90.0), _row(65.0, 100.0), _row(80.0, float("nan"))]
    assert best_index(table) == 3  # no guard: the score alone (the unmeasured success is not looked at)
    assert best_index(table, max_success_drop=0) == 2  # #1 fails one edit more in ten, #3's success unknown
    assert best_index(table, max_success_drop=10) == 1
    assert best_index(table, max_ppl=0.05, max_success_drop=0) == 0  # nothing eligible: the current settings
    assert best_index([_row(50.0, 80.0), _row(55.0, 90.0)], max_success_drop=0) == 1  # a gain is always allowed
    assert keeps_success(table[0], table[0], 0) and not keeps_success(table[3], table[0], 100)
    # the current settings are their own reference, measured or not
    nan_cur = _row(10.0, float("nan"))
    assert keeps_success(nan_cur, nan_cur, 0) and best_index([nan_cur, _row(20.0, 100.0)], max_success_drop=0) == 0


def test_tune_command_applies_the_guard_and_says_why(model_copy, tmp_path, monkeypatch, capsys):
    """The command's path (rows are stand-ins: ``run_row`` replaced; the real rows' success rates
    are the bench's own tests'): the default guard keeps the current settings over a candidate that
    scores higher at a lower success rate, says so in the output, the JSON, the profile's notes and
    the PNG; ``--max-success-drop 10`` lets it through; bad values are named errors before ``--out``."""
    import mobiedit.bench as bench
    from mobiedit.cli import main
    from mobiedit.profile import read_profile
    from mobiedit.requests import bundled_path

    def fake_row(spec, model_dir, req_file, layer, seed, out, ability, progress, offset):
        cand = bool(spec.sets)
        q = {"efficacy_prob": 100.0, "generalization_prob": 90.0 if cand else 60.0, "locality_unchanged": 100.0}
        return {"quality": q, "success_rate": 90.0 if cand else 100.0, "loss_evals_median_success": 10,
                "wall_per_edit_s": 1.0}

    monkeypatch.setattr(bench, "run_row", fake_row)
    reqs = tmp_path / "reqs.json"
    reqs.write_text(json.dumps(json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:3]))
    argv = ["--quiet", "tune", "--model", str(model_copy), "--requests", str(reqs), "--n", "1", "--layers", "0",
            "--grid", "objective.weight_decay=8", "--write-profile"]
    assert main([*argv, "--out", str(tmp_path / "t")]) == 0
    out = capsys.readouterr().out
    assert "#1 not chosen: success 90.0 % against the current settings' 100.0 % (--max-success-drop 0)" in out
    assert "chosen: #0" in out
    res = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert res["chosen"] == 0 and res["max_success_drop"] == 0.0
    assert read_profile(model_copy).notes["tune"]["max_success_drop"] == 0.0
    assert (tmp_path / "t" / "tune.png").stat().st_size > 1000
    assert main([*argv, "--out", str(tmp_path / "t2"), "--max-success-drop", "10"]) == 0
    assert "not chosen" not in capsys.readouterr().out
    assert json.loads((tmp_path / "t2" / "tune.json").read_text())["chosen"] == 1
    for bad in ("-1", "101", "nan"):
        assert main([*argv, "--out", str(tmp_path / "bad"), "--max-success-drop", bad]) == 2
        err = capsys.readouterr().err
        assert "--max-success-drop" in err and "fix:" in err and not (tmp_path / "bad").exists()


@pytest.mark.parametrize("drop", [None, 0.0])
def test_the_plot_marks_what_was_ruled_out(tmp_path, drop):
    from mobiedit.tune import SCORES, eligible
    from mobiedit.tune_plot import plot

    table = [dict(_row(60.0, 100.0), layer=0, settings={}), dict(_row(70.0, 90.0), layer=0, settings={"x.y": 1})]
    ok = [eligible(r, table, None, drop) for r in table]
    assert ok == ([True, True] if drop is None else [True, False])
    plot(table, best_index(table, None, drop), tmp_path / "t.png", "t", SCORES["prob"], ok, "success below")
    assert (tmp_path / "t.png").stat().st_size > 1000
