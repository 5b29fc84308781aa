"""The forward-only search's own settings in the model profile (``methods.mobiedit.zo`` / ``quant``):
a model can ship its own estimator settings (lr, h) and loop forward (e.g. bf16 matmuls) — ``edit``,
the ``mobiedit`` bench row, ``tune`` and the bundle's recipe all take them, named recipes and ROME
do not, and a bad or misplaced setting is a named error."""
from __future__ import annotations

import json

import pytest

from mobiedit.bench_rows import row_config
from mobiedit.errors import ConfigError
from mobiedit.profile import ModelProfile, read_profile, search_settings, write_profile
from mobiedit.recipes import FZOO
from mobiedit.resolve import load_method_config
from mobiedit.tune import parse_grid, tuned_profile

from test_profile_methods import _export_config

OWN = {"mobiedit": {"zo": {"lr": 2.0, "h": 0.2}, "quant": {"scheme": "bf16"}}}


def test_the_searchs_own_settings_reach_its_configs_and_the_bundle_recipe(model_copy):
    from mobiedit.export.recipe import shipped_recipe, with_search

    write_profile(model_copy, ModelProfile(edit_layer=0, methods=OWN))
    fwd = load_method_config("mobiedit", model_dir=model_copy)
    assert (fwd.zo.lr, fwd.zo.h, fwd.quant.scheme) == (2.0, 0.2, "bf16")
    assert (fwd.zo.estimator, fwd.zo.n_dirs, fwd.zo.max_steps) == (FZOO.zo.estimator, FZOO.zo.n_dirs, FZOO.zo.max_steps)
    row = row_config("mobiedit", 0, 3, (), model_copy)  # the row `edit` runs: the profile's search
    assert (row.zo.lr, row.zo.h, row.zo.seed, row.quant.scheme) == (2.0, 0.2, 3, "bf16")
    named = row_config("fzoo-stopw", 0, 0, (), model_copy)  # a named recipe stays itself
    assert (named.zo.lr, named.zo.h, named.quant.scheme) == (FZOO.zo.lr, FZOO.zo.h, "w8a16")
    assert row_config("mobiedit", 0, 0, (("zo.h", 0.5),), model_copy).zo.h == 0.5  # --set over the profile
    from mobiedit.export.quality import eager_config

    assert eager_config(model_copy, 0) == row_config("mobiedit", 0, 0, (), model_copy)  # bench-export's eager row
    rome = load_method_config("rome", model_dir=model_copy)
    assert rome.quant.scheme != "bf16"  # ROME keeps its own forward
    # the export config builds (its edit section has no zo / quant); the bundle's recipe takes zo
    assert _export_config(model_copy).edit.recipe == "fzoo"
    assert search_settings(model_copy) == {"lr": 2.0, "h": 0.2}
    rec = with_search(shipped_recipe(17), search_settings(model_copy))
    assert (rec.zo.lr, rec.zo.h, rec.zo.n_dirs, rec.zo.check_at) == (2.0, 0.2, 16, "base")
    assert rec.as_manifest()["zo"]["h"] == 0.2
    assert with_search(shipped_recipe(17), {}) == shipped_recipe(17)


@pytest.mark.parametrize("zo, match, where", [
    ({"n_dirs": 8}, "8 directions", "methods.mobiedit.zo.n_dirs"),
    ({"estimator": "paper"}, "sets estimator", "methods.mobiedit.zo.estimator"),
    ({"lr": -1}, "lr", "methods.mobiedit.zo"),
])
def test_a_profile_search_the_bundle_cannot_run_is_refused(zo, match, where):
    from mobiedit.export.recipe import shipped_recipe, with_search

    with pytest.raises(ConfigError, match=match) as e:
        with_search(shipped_recipe(17), zo)
    assert where in e.value.where and e.value.fix


@pytest.mark.parametrize("profile, match, where", [
    ({"methods": {"rome": {"zo": {"lr": 2}}}}, "unknown section 'zo'", "field 'methods'.rome"),
    ({"zo": {"lr": 2}}, "unknown field", "mobiedit.json"),
    ({"methods": {"mobiedit": {"quant": 3}}}, "must be an object", "field 'methods'.mobiedit.quant"),
])
def test_a_misplaced_search_section_is_a_named_error(model_copy, profile, match, where):
    (model_copy / "mobiedit.json").write_text(json.dumps({"edit_layer": 0, **profile}))
    with pytest.raises(ConfigError, match=match) as e:
        read_profile(model_copy)
    assert e.value.where.endswith(where) and e.value.fix


def test_a_bad_search_setting_names_the_profile(model_copy):
    write_profile(model_copy, ModelProfile(edit_layer=0, methods={"mobiedit": {"quant": {"scheme": "int3"}}}))
    with pytest.raises(ConfigError, match="int3"):
        load_method_config("mobiedit", model_dir=model_copy)


def test_tune_writes_the_search_settings_into_the_methods_own_section(model_copy, tmp_path, capsys):
    from mobiedit.cli import main
    from mobiedit.requests import bundled_path

    assert parse_grid(["zo.h=0.05,0.2", "quant.scheme=w8a16,bf16"]) == [("zo.h", [0.05, 0.2]),
                                                                        ("quant.scheme", ["w8a16", "bf16"])]
    write_profile(model_copy, ModelProfile(edit_layer=0, methods={"mobiedit": {"zo": {"lr": 2.0}}}))
    tuning = {"n": 2, "requests_sha256": "abc", "case_ids": ["b"], "offset": 5, "requests": "r.json"}
    p = tuned_profile(model_copy, {"layer": 0, "settings": {"zo.h": 0.2, "quant.scheme": "bf16"}}, "mobiedit", tuning,
                      "mobiedit")
    assert p.methods == {"mobiedit": {"zo": {"lr": 2.0, "h": 0.2}, "quant": {"scheme": "bf16"}}}
    assert p.notes["tune:mobiedit"] is tuning
    reqs = tmp_path / "reqs.json"
    reqs.write_text(json.dumps(json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:3]))
    base = ["--quiet", "tune", "--model", str(model_copy), "--requests", str(reqs), "--n", "1", "--grid", "zo.h=0.2"]
    for extra in (["--method", "mobiedit"], ["--method", "rome-lean", "--scope", "method"]):  # shared / ROME: refused
        assert main([*base, *extra, "--out", str(tmp_path / "bad")]) == 2
        assert "--grid" in capsys.readouterr().err and not (tmp_path / "bad").exists()


def test_the_smollm2_registry_profile_ships_its_tuned_search_apart_from_the_bench():
    from importlib import resources

    from mobiedit.checkpoints import CHECKPOINTS
    from mobiedit.requests import load_requests

    prof = ModelProfile(**CHECKPOINTS["smollm2-135m"].profile)
    assert prof.methods == {"mobiedit": {"zo": {"lr": 2.0, "h": 0.2}, "quant": {"scheme": "bf16"}}}
    tuned = set(prof.notes["tune:mobiedit"]["case_ids"])
    known = [r.case_id for r in load_requests(resources.files("mobiedit") / "data" / "known" / "smollm2-135m.json")]
    assert tuned == set(known[200:220]) and not tuned & set(known[:100])  # the 100-request bench is held out
