"""``mobiedit tune`` and the profile's settings (issue 18): the grid, the score, the choice, the
profile it writes, and every config path (edit, bench, export) reading those settings."""
from __future__ import annotations

import argparse
import json
import math
import shutil

import pytest

from mobiedit.bench_rows import row_config
from mobiedit.errors import ConfigError
from mobiedit.profile import ModelProfile, check_not_tuned_on, profile_settings, read_profile, write_profile
from mobiedit.resolve import load_method_config
from mobiedit.tune import best_index, candidates, distinct, note_row, parse_grid, tune_score, tuned_profile


def test_grid_items_and_candidates():
    grid = parse_grid(["objective.clamp_norm_factor=2,4", "objective.kl_prompt={} is"])
    assert grid == [("objective.clamp_norm_factor", [2, 4]), ("objective.kl_prompt", ["{} is"])]
    assert parse_grid(["context.lengths=[[[5, 5]], [[5, 10], [10, 10]]]"]) == \
        [("context.lengths", [[[5, 5]], [[5, 10], [10, 10]]])]
    for bad in ("update.rule=rows", "objective.clamp_norm_factor", "objective..x=1", "objective.x=", "context.lengths=[[5",
                "context.lengths=[]"):
        with pytest.raises(ConfigError, match="grid item") as e:
            parse_grid([bad])
        assert e.value.where == "--grid"
    cands = candidates(1, [1, 2], [("objective.clamp_norm_factor", [2, 4])])
    assert cands[0] == (1, ()) and len(cands) == 5  # the current settings first, then 2 layers x 2 values
    # a value equal to the current setting (clamp 4 is the default) is the current candidate: dropped
    kept = distinct(cands, "rome", 0, None)
    assert kept == [(1, ()), (1, (("objective.clamp_norm_factor", 2),)), (2, (("objective.clamp_norm_factor", 2),)),
                    (2, (("objective.clamp_norm_factor", 4),))]
    with pytest.raises(ConfigError, match="clamp_norm_factorr"):
        distinct([(1, (("objective.clamp_norm_factorr", 2),))], "rome", 0, None)


def test_score_is_a_harmonic_mean_and_ties_keep_the_current():
    q = {"efficacy_prob": 100.0, "generalization_prob": 50.0, "locality_unchanged": 100.0}
    assert tune_score(q) == pytest.approx(3 / (1 / 100 + 1 / 50 + 1 / 100))
    assert tune_score({**q, "generalization_prob": 0.0}) == 0.0
    assert math.isnan(tune_score({**q, "locality_unchanged": float("nan")}))
    # "answers": the greedy answer's efficacy and generalization, not the probability convention's
    a = {**q, "efficacy_acc": 100.0, "generalization_acc": 25.0}
    assert tune_score(a, "answers") == pytest.approx(3 / (1 / 100 + 1 / 25 + 1 / 100))
    assert tune_score(a, "prob") == tune_score(q)
    assert math.isnan(tune_score(q, "answers"))  # the columns it ranks by are missing
    rows = [{"score": 90.0}, {"score": 90.0}, {"score": float("nan")}, {"score": 80.0}]
    assert best_index(rows) == 0
    assert best_index(rows + [{"score": 90.5}]) == 4
    assert best_index([{"score": float("nan")}, {"score": 10.0}]) == 1


def test_a_perplexity_budget_rules_out_candidates_over_it():
    """``--max-ppl-change``: the best score among the candidates within the budget; a figure not
    measured is never within it; with none within it the current settings (#0) stay."""
    nan = float("nan")
    rows = [{"score": 80.0, "perplexity_change_pct": 1.3}, {"score": 95.0, "perplexity_change_pct": 2.0},
            {"score": 90.0, "perplexity_change_pct": 0.7}, {"score": 99.0, "perplexity_change_pct": nan}]
    assert best_index(rows) == 3  # no budget: the score alone
    assert best_index(rows, 1.0) == 2 and best_index(rows, 2.0) == 1 and best_index(rows, 0.5) == 0
    assert best_index([{"score": 90.0, "perplexity_change_pct": 0.2}, {"score": 90.0, "perplexity_change_pct": 0.1}],
                      1.0) == 0  # a tie keeps the earlier
    assert note_row({"layer": 2, "settings": {"a": 1}, "score": nan, "perplexity_change_pct": 0.5}) == \
        {"layer": 2, "settings": {"a": 1}, "score": None, "perplexity_change_pct": 0.5}
    assert note_row({"layer": 2, "settings": {}, "score": 90.0})["perplexity_change_pct"] is None


def test_profile_settings_reach_every_config_path(model_copy):
    from mobiedit.export.cli import config_from_args

    assert profile_settings(model_copy) == {}
    write_profile(model_copy, ModelProfile(edit_layer=0, objective={"clamp_norm_factor": 2.0},
                                           context={"lengths": [[3, 2]]}))
    assert profile_settings(model_copy) == {"objective": {"clamp_norm_factor": 2.0}, "context": {"lengths": [[3, 2]]}}
    for method in ("rome", "mobiedit"):
        cfg = load_method_config(method, model_dir=model_copy)
        assert cfg.objective.clamp_norm_factor == 2.0 and cfg.context.lengths == ((3, 2),)
    assert load_method_config("rome").objective.clamp_norm_factor == 4.0  # no model: the defaults
    yml = model_copy.parent / "c.yaml"
    yml.write_text("objective:\n  clamp_norm_factor: 3.0\n")
    assert load_method_config("rome", yml, model_dir=model_copy).objective.clamp_norm_factor == 3.0  # the user's wins
    rc = row_config("fzoo", 0, 0, (), model_copy)
    assert rc.objective.clamp_norm_factor == 2.0 and rc.zo.estimator == "fzoo"
    assert row_config("fzoo", 0, 0, (("objective.clamp_norm_factor", 8),), model_copy).objective.clamp_norm_factor == 8
    args = argparse.Namespace(**{k: None for k in ("quant", "edit_quant", "layer", "seed")}, runtime="onnxruntime",
                              quantize_lm_head=False, quantize_embedding=False, no_lint=False, no_mom2=False)
    from mobiedit.export.cli import _INT_FLAGS

    for flag in _INT_FLAGS:
        setattr(args, flag.replace("-", "_"), None)
    ec = config_from_args(args, model_copy)
    assert ec.edit.objective.clamp_norm_factor == 2.0 and ec.edit.context.lengths == ((3, 2),)
    assert config_from_args(args).edit.objective.clamp_norm_factor == 4.0
    write_profile(model_copy, ModelProfile(edit_layer=0, objective={"clamp": 2.0}))
    with pytest.raises(ConfigError, match="clamp") as e:
        load_method_config("rome", model_dir=model_copy)
    assert "mobiedit.json" in e.value.where


def test_tuned_profile_and_the_bench_guard(model_copy):
    write_profile(model_copy, ModelProfile(edit_layer=0, layer_reason="trace", objective={"kl_factor": 0.1}))
    tuning = {"n": 2, "requests_sha256": "abc", "case_ids": ["a", "b"], "offset": 5, "requests": "r.json"}
    p = tuned_profile(model_copy, {"layer": 0, "settings": {"objective.weight_decay": 0.1}}, "rome-lean", tuning)
    assert p.objective == {"kl_factor": 0.1, "weight_decay": 0.1} and p.layer_reason == "trace"
    assert p.notes["tune"] is tuning
    p1 = tuned_profile(model_copy, {"layer": 1, "settings": {}}, "rome-lean", tuning)
    assert p1.edit_layer == 1 and "mobiedit tune" in p1.layer_reason
    write_profile(model_copy, p)
    with pytest.raises(ConfigError, match="tuned this model's profile") as e:
        check_not_tuned_on(model_copy, "abc", ["x", "b"])
    assert e.value.where == "--offset"
    check_not_tuned_on(model_copy, "abc", ["x", "y"])  # other requests
    check_not_tuned_on(model_copy, "other-file", ["a", "b"])  # another request file


def test_tune_command_writes_table_png_and_profile(model_copy, tmp_path):
    from mobiedit.cli import main
    from mobiedit.requests import bundled_path

    reqs = tmp_path / "reqs.json"
    reqs.write_text(json.dumps(json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:3]))
    out = tmp_path / "tune"
    argv = ["--quiet", "tune", "--model", str(model_copy), "--requests", str(reqs), "--n", "1", "--layers", "0",
            "--grid", "objective.clamp_norm_factor=1,4", "--out", str(out), "--write-profile"]
    assert main(argv) == 0
    res = json.loads((out / "tune.json").read_text())
    assert [r["settings"] for r in res["rows"]] == [{}, {"objective.clamp_norm_factor": 1}]  # 4: the current
    assert res["offset"] == 2 and len(res["case_ids"]) == 1 and (out / "tune.png").stat().st_size > 1000
    prof = read_profile(model_copy)
    best = res["rows"][res["chosen"]]
    assert prof.edit_layer == 0 and prof.notes["tune"]["case_ids"] == res["case_ids"]
    assert prof.objective == {k.split(".")[1]: v for k, v in best["settings"].items()}
    assert main(["tune", "--model", str(model_copy), "--requests", str(reqs), "--n", "9"]) == 2  # beyond the file
    # the greedy-answer score: the same logged rows (resumed, no edit), ranked by it and named in the notes
    out2 = tmp_path / "tune_answers"
    shutil.copytree(out, out2)
    assert main([*argv[:-3], "--out", str(out2), "--score", "answers"]) == 0
    res2 = json.loads((out2 / "tune.json").read_text())
    assert res2["score"] == "harmonic mean of efficacy_acc, generalization_acc, locality_unchanged"
    for r in res2["rows"]:
        assert r["score"] == pytest.approx(tune_score(r["quality"], "answers"))
        assert r["quality"] in [r1["quality"] for r1 in res["rows"]]  # the first run's edits, resumed


def test_profile_success_rule_reaches_mobiedit_configs_the_bundle_recipe_and_tune(model_copy):
    """A model's own success rule (issue 18: the margin chosen per model): ``success.nll`` sets
    MobiEdit's margin on every config path and the bundle's recipe; ROME has no NLL margin, its
    ``success_fraction`` still follows; bad values are named errors; tune sweeps and writes it."""
    from mobiedit.export.recipe import shipped_recipe, with_success
    from mobiedit.profile import config_key, success_settings
    from mobiedit.tune import row_sets

    write_profile(model_copy, ModelProfile(edit_layer=0, success={"nll": 0.1, "fraction": 1.0}))
    assert success_settings(model_copy) == {"nll": 0.1, "fraction": 1.0}
    mc = load_method_config("mobiedit", model_dir=model_copy)
    assert (mc.success_nll, mc.success_fraction) == (0.1, 1.0) and mc.recipe.success.nll == 0.1
    rc = load_method_config("rome", model_dir=model_copy)
    assert rc.success_fraction == 1.0 and not hasattr(rc, "success_nll")
    assert row_config("fzoo-stopw", 0, 0, (), model_copy).success_nll == 0.1
    assert row_config("fzoo-stopw", 0, 0, row_sets((("success.nll", 0.3),)), model_copy).success_nll == 0.3
    recipe = with_success(shipped_recipe(4), success_settings(model_copy))
    assert recipe.as_manifest()["success"]["nll"] == 0.1 and recipe.as_manifest()["success"]["fraction"] == 1.0
    assert with_success(shipped_recipe(4), {}) == shipped_recipe(4)
    assert config_key("success.nll") == "success_nll" and config_key("objective.kl_factor") == "objective.kl_factor"
    tuning = {"n": 1, "case_ids": []}
    p = tuned_profile(model_copy, {"layer": 0, "settings": {"success.nll": 0.2}}, "fzoo-stopw", tuning)
    assert p.success == {"nll": 0.2, "fraction": 1.0}
    for bad, match in (({"nll": 0}, "nll=0 must be > 0"), ({"fraction": 2}, "out of"), ({"margin": 1}, "unknown")):
        (model_copy / "mobiedit.json").write_text(json.dumps({"edit_layer": 0, "success": bad}))
        with pytest.raises(ConfigError, match=match) as e:
            load_method_config("mobiedit", model_dir=model_copy)
        assert "success" in e.value.where
    assert parse_grid(["success.nll=0.1,0.5"]) == [("success.nll", [0.1, 0.5])]


def test_profile_settle_phase_reaches_mobiedit_configs_the_bundle_recipe_and_tune(model_copy):
    """A model's settle phase (``settle``, recipes.Settle): it reaches MobiEdit's config on every path
    and the bundle's recipe (and back through the manifest check), not ROME's; bad values are named
    errors; tune sweeps it for MobiEdit rows only and writes it into the profile."""
    from mobiedit.export.recipe import check_recipe, shipped_recipe, with_settle
    from mobiedit.profile import settle_settings
    from mobiedit.recipes import Settle
    from mobiedit.tune import row_sets

    write_profile(model_copy, ModelProfile(edit_layer=0, settle={"rounds": 3}))
    assert settle_settings(model_copy) == {"rounds": 3}
    mc = load_method_config("mobiedit", model_dir=model_copy)
    assert mc.settle == Settle(rounds=3) and mc.recipe.settle == Settle(rounds=3)
    assert not hasattr(load_method_config("rome", model_dir=model_copy), "settle")
    assert row_config("fzoo-stopw", 0, 0, (), model_copy).settle.rounds == 3
    assert row_config("fzoo-stopw", 0, 0, row_sets((("settle.shrink", 0.5),)), model_copy).settle == \
        Settle(rounds=3, shrink=0.5)
    recipe = with_settle(shipped_recipe(4), settle_settings(model_copy))
    assert recipe.as_manifest()["settle"] == {"rounds": 3, "shrink": 0.8, "steps": 20}
    assert check_recipe(recipe.as_manifest(), "manifest.json").settle == Settle(rounds=3)
    assert with_settle(shipped_recipe(4), {}) == shipped_recipe(4) and shipped_recipe(4).settle == Settle()
    p = tuned_profile(model_copy, {"layer": 0, "settings": {"settle.rounds": 5}}, "fzoo-stopw", {"n": 1, "case_ids": []})
    assert p.settle == {"rounds": 5}
    for bad, match in (({"rounds": -1}, "settle.rounds"), ({"shrink": 1.5}, "settle.shrink"), ({"grow": 1}, "unknown")):
        (model_copy / "mobiedit.json").write_text(json.dumps({"edit_layer": 0, "settle": bad}))
        with pytest.raises(ConfigError, match=match) as e:
            load_method_config("mobiedit", model_dir=model_copy)
        assert "settle" in (e.value.where or "") + str(e.value)
    assert parse_grid(["settle.rounds=0,3"]) == [("settle.rounds", [0, 3])]


def test_tune_with_a_perplexity_budget_measures_ability_and_chooses_within_it(model_copy, tmp_path, monkeypatch,
                                                                            capsys):
    """The command's path with ``--max-ppl-change``: every row runs with general ability, the
    budget decides the choice (a candidate over it loses to a lower score), and the table, the
    JSON, the profile's notes and the PNG carry the perplexity change and the budget. The rows are
    stand-ins (``run_row`` replaced): the real row's ability is measured by the bench's own tests."""
    import mobiedit.bench as bench
    from mobiedit.cli import main
    from mobiedit.requests import bundled_path

    seen = []

    def fake_row(spec, model_dir, req_file, layer, seed, out, ability, progress, offset):
        seen.append((spec.sets, ability))
        big = bool(spec.sets)  # the grid's candidate: a better score, perplexity over the budget
        q = {"efficacy_prob": 100.0, "generalization_prob": 90.0 if big else 60.0, "locality_unchanged": 100.0,
             "efficacy_acc": 100.0, "generalization_acc": 50.0, "perplexity_change_pct": 1.8 if big else 0.4}
        return {"quality": q, "success_rate": 100.0, "loss_evals_median_success": 10, "wall_per_edit_s": 1.0}

    monkeypatch.setattr(bench, "run_row", fake_row)
    reqs = tmp_path / "reqs.json"
    reqs.write_text(json.dumps(json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:3]))
    argv = ["--quiet", "tune", "--model", str(model_copy), "--requests", str(reqs), "--n", "1", "--layers", "0",
            "--grid", "objective.weight_decay=8", "--out", str(tmp_path / "t"), "--max-ppl-change", "1",
            "--write-profile"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert [a for _, a in seen] == [True, True] and seen[1][0] == (("objective.weight_decay", 8),)
    assert "ppl%" in out and "1.80" in out and "0.40" in out and "chosen: #0" in out
    res = json.loads((tmp_path / "t" / "tune.json").read_text())
    assert res["chosen"] == 0 and res["max_ppl_change"] == 1.0
    assert [r["perplexity_change_pct"] for r in res["table"]] == [0.4, 1.8]
    assert read_profile(model_copy).notes["tune"]["max_ppl_change"] == 1.0
    assert (tmp_path / "t" / "tune.png").stat().st_size > 1000
    # without the budget the better score wins
    seen.clear()
    assert main([*argv[:-3], "--out", str(tmp_path / "t2")]) == 0
    assert json.loads((tmp_path / "t2" / "tune.json").read_text())["chosen"] == 1 and [a for _, a in seen] == [False] * 2
    # over budget everywhere: the current settings stay, and the output says why
    assert main([*argv[:-2], "0.1", "--out", str(tmp_path / "t3")]) == 0
    assert "no candidate keeps the mean perplexity change within 0.1 %" in capsys.readouterr().out
    for bad in ("-1", "nan", "inf"):
        assert main([*argv[:-2], bad, "--out", str(tmp_path / "bad")]) == 2
        err = capsys.readouterr().err
        assert "--max-ppl-change" in err and "fix:" in err and not (tmp_path / "bad").exists()


def test_tune_refuses_a_margin_or_settle_grid_for_rome(model_copy, tmp_path, capsys):
    from mobiedit.cli import main

    for grid in ("success.nll=0.1,0.5", "settle.rounds=3"):
        assert main(["tune", "--model", str(model_copy), "--method", "rome-lean", "--grid", grid,
                     "--n", "1", "--out", str(tmp_path / "t")]) == 2
        assert "forward-only" in capsys.readouterr().err and not (tmp_path / "t").exists()


def test_bad_settings_and_an_unknown_model_create_no_output_folder(model_copy, tmp_path, capsys):
    """A value a row's config cannot take, a key it lacks, or a --model that is neither a folder nor
    a checkpoint name: a named error before ``--out`` exists (no empty folder left to clean up)."""
    from mobiedit.cli import main
    from mobiedit.requests import bundled_path

    reqs = tmp_path / "reqs.json"
    reqs.write_text(json.dumps(json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:3]))
    common = ["--model", str(model_copy), "--requests", str(reqs), "--n", "1"]
    runs = {"t1": ["tune", *common, "--method", "fzoo-stopw", "--grid", "success.nll=abc"],
            "t2": ["tune", *common, "--method", "fzoo-stopw", "--grid", "objective.nosuch=1"],
            "b1": ["bench", *common, "--layer", "0", "--rows", "fzoo-stopw", "--set", "fzoo-stopw:nosuch.key=1",
                   "--no-ability"],
            "b2": ["bench", *common, "--layer", "0", "--rows", "rome-lean", "--set", "objective.kl_factor=\"x\"",
                   "--no-ability"],
            "nomodel": ["tune", "--model", str(tmp_path / "no_such_model"), "--n", "1"]}
    for name, argv in runs.items():
        capsys.readouterr()
        assert main(["--quiet", *argv, "--out", str(tmp_path / name)]) == 2, name
        err = capsys.readouterr().err
        assert err.startswith("mobiedit: error:") and "fix:" in err and "Traceback" not in err, (name, err)
        assert not (tmp_path / name).exists(), name
    assert "no_such_model" in err and "smollm2-135m" in err and "gemma3-270m" in err  # the last: both choices named


def test_registry_tune_notes_name_the_score_as_tune_writes_it():
    """The registry profiles' ``notes.tune`` record what `tune --write-profile` wrote: the score
    named exactly as :func:`mobiedit.tune.score_label` names it (SmolLM2: prob; Gemma: answers)."""
    from mobiedit.checkpoints import CHECKPOINTS
    from mobiedit.tune import score_label

    assert CHECKPOINTS["smollm2-135m"].profile["notes"]["tune"]["score"] == score_label("prob")
    assert CHECKPOINTS["gemma3-270m"].profile["notes"]["tune"]["score"] == score_label("answers")
