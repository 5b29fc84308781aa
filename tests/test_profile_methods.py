"""A method's own settings in the model profile (``methods``): each search runs at the settings
tuned for it — ROME's decay where its tune chose one, the forward-only search's where its did — on
every config path (edit, bench rows, tune, sequential, export), and ``tune --scope method`` writes
them there without touching the shared settings or the other method's tuning."""
from __future__ import annotations

import argparse
import json

import pytest

from mobiedit.bench_rows import row_config
from mobiedit.errors import ConfigError
from mobiedit.profile import (PROFILE_METHODS, ModelProfile, check_not_tuned_on, profile_settings, read_profile,
                              with_profile, write_profile)
from mobiedit.resolve import load_method_config
from mobiedit.tune import tuned_profile


def _export_config(model_dir):
    from mobiedit.export.cli import _INT_FLAGS, config_from_args

    args = argparse.Namespace(**{k: None for k in ("quant", "edit_quant", "layer", "seed")}, runtime="onnxruntime",
                              quantize_lm_head=False, quantize_embedding=False, no_lint=False, no_mom2=False)
    for flag in _INT_FLAGS:
        setattr(args, flag.replace("-", "_"), None)
    return config_from_args(args, model_dir)


def test_the_profile_methods_are_the_method_table():
    from mobiedit.methods import METHODS

    assert PROFILE_METHODS == tuple(METHODS)


def test_a_methods_own_settings_reach_its_configs_only(model_copy):
    write_profile(model_copy, ModelProfile(
        edit_layer=0, objective={"clamp_norm_factor": 2.0, "weight_decay": 0.5},
        methods={"rome": {"objective": {"weight_decay": 2}}, "mobiedit": {"context": {"lengths": [[3, 2]]}}}))
    assert profile_settings(model_copy) == {"objective": {"clamp_norm_factor": 2.0, "weight_decay": 0.5}}
    assert profile_settings(model_copy, "rome") == {"objective": {"clamp_norm_factor": 2.0, "weight_decay": 2}}
    rome, fwd = load_method_config("rome", model_dir=model_copy), load_method_config("mobiedit", model_dir=model_copy)
    # the method's own key over the shared section, key by key: the shared clamp stays for both
    assert (rome.objective.clamp_norm_factor, rome.objective.weight_decay) == (2.0, 2)
    assert (fwd.objective.clamp_norm_factor, fwd.objective.weight_decay) == (2.0, 0.5)
    assert fwd.context.lengths == ((3, 2),) and rome.context.lengths != ((3, 2),)
    # bench rows go by their method; the bundle (export) runs the forward-only search
    assert row_config("rome-lean", 0, 0, (), model_copy).objective.weight_decay == 2
    assert row_config("fzoo-stopw", 0, 0, (), model_copy).objective.weight_decay == 0.5
    assert row_config("rome-lean", 0, 0, (("objective.weight_decay", 8),), model_copy).objective.weight_decay == 8
    ec = _export_config(model_copy)
    assert ec.edit.objective.weight_decay == 0.5 and ec.edit.context.lengths == ((3, 2),)
    yml = model_copy.parent / "c.yaml"
    yml.write_text("objective:\n  weight_decay: 3.0\n")
    assert load_method_config("rome", yml, model_dir=model_copy).objective.weight_decay == 3.0  # the user's wins
    with pytest.raises(ValueError, match="not one of"):  # a caller that names no method of the table
        with_profile(rome, model_copy, method="backprop")


@pytest.mark.parametrize("methods, match, where", [
    ({"backprop": {}}, "unknown method 'backprop'", "field 'methods'"),
    ({"rome": {"success": {"nll": 0.1}}}, "unknown section 'success'", "field 'methods'.rome"),
    ({"rome": [1]}, "must be an object", "field 'methods'.rome"),
    ({"rome": {"objective": 2}}, "must be an object", "field 'methods'.rome.objective"),
    ([["rome"]], "must be an object", "field 'methods'"),
])
def test_a_bad_methods_section_is_a_named_error(model_copy, methods, match, where):
    (model_copy / "mobiedit.json").write_text(json.dumps({"edit_layer": 0, "methods": methods}))
    with pytest.raises(ConfigError, match=match) as e:
        read_profile(model_copy)
    assert e.value.where.endswith(where) and e.value.fix


def test_a_bad_setting_in_a_methods_section_names_the_profile(model_copy):
    (model_copy / "mobiedit.json").write_text(json.dumps({"edit_layer": 0,
                                                          "methods": {"rome": {"objective": {"decay": 2}}}}))
    with pytest.raises(ConfigError, match="decay") as e:
        load_method_config("rome", model_dir=model_copy)
    assert "mobiedit.json" in e.value.where


def test_tune_scope_method_writes_the_methods_own_section_and_its_guard(model_copy):
    write_profile(model_copy, ModelProfile(edit_layer=0, objective={"kl_factor": 0.1}, success={"nll": 0.1},
                                           notes={"tune": {"requests_sha256": "abc", "case_ids": ["a"]}}))
    tuning = {"n": 2, "requests_sha256": "abc", "case_ids": ["b", "c"], "offset": 5, "requests": "r.json"}
    p = tuned_profile(model_copy, {"layer": 0, "settings": {"objective.weight_decay": 2}}, "rome-lean", tuning, "rome")
    assert p.objective == {"kl_factor": 0.1} and p.methods == {"rome": {"objective": {"weight_decay": 2}}}
    assert p.notes["tune:rome"] is tuning and p.notes["tune"]["case_ids"] == ["a"]  # the other tune's guard stays
    # success and settle are the forward-only search's own already: they stay top-level
    p2 = tuned_profile(model_copy, {"layer": 0, "settings": {"success.nll": 0.2}}, "fzoo-stopw", tuning, "mobiedit")
    assert p2.success == {"nll": 0.2} and p2.methods == {}
    write_profile(model_copy, p)
    for cases in (["a"], ["x", "c"]):  # either tune's requests are refused
        with pytest.raises(ConfigError, match="tuned this model's profile"):
            check_not_tuned_on(model_copy, "abc", cases)
    check_not_tuned_on(model_copy, "abc", ["x", "y"])
    assert load_method_config("rome", model_dir=model_copy).objective.weight_decay == 2
    assert load_method_config("mobiedit", model_dir=model_copy).objective.weight_decay != 2
    # a shared tune of the same setting applies to every method: ROME's own value of it goes
    p3 = tuned_profile(model_copy, {"layer": 0, "settings": {"objective.weight_decay": 0.3}}, "fzoo-stopw", tuning)
    assert p3.objective == {"kl_factor": 0.1, "weight_decay": 0.3} and p3.methods == {}


def test_tune_command_with_scope_method(model_copy, tmp_path, monkeypatch, capsys):
    """The command's path (rows stand-ins, as in test_tune): ``--scope method`` writes the chosen
    objective under the tuned method and refuses to move the shared edit layer."""
    import mobiedit.bench as bench
    from mobiedit.cli import main
    from mobiedit.requests import bundled_path

    def fake_row(spec, model_dir, req_file, layer, seed, out, ability, progress, offset):
        q = {"efficacy_prob": 100.0, "generalization_prob": 90.0 if spec.sets else 60.0, "locality_unchanged": 100.0}
        return {"quality": q, "success_rate": 100.0, "loss_evals_median_success": 10, "wall_per_edit_s": 1.0}

    monkeypatch.setattr(bench, "run_row", fake_row)
    write_profile(model_copy, ModelProfile(edit_layer=0, objective={"weight_decay": 0.5}))
    reqs = tmp_path / "reqs.json"
    reqs.write_text(json.dumps(json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:3]))
    argv = ["--quiet", "tune", "--model", str(model_copy), "--requests", str(reqs), "--n", "1", "--method", "rome-lean",
            "--grid", "objective.weight_decay=2", "--out", str(tmp_path / "t"), "--write-profile", "--scope", "method"]
    assert main(argv) == 0
    prof = read_profile(model_copy)
    assert prof.objective == {"weight_decay": 0.5} and prof.methods == {"rome": {"objective": {"weight_decay": 2}}}
    assert prof.notes["tune:rome"]["method"] == "rome-lean" and "tune" not in prof.notes
    capsys.readouterr()
    assert main([*argv, "--layers", "1", "--out", str(tmp_path / "bad")]) == 2
    err = capsys.readouterr().err
    assert "--scope" in err and "fix:" in err and not (tmp_path / "bad").exists()


def test_the_gemma_registry_profile_runs_rome_at_its_own_decay():
    """ROME at its own decay; the forward-only search keeps the shared objective and multiplies its
    read-out's differences on bf16 operands (session 52), its tuning on the profile's own requests."""
    from mobiedit.checkpoints import CHECKPOINTS
    from mobiedit.forward.quant import QuantConfig

    prof = ModelProfile(**CHECKPOINTS["gemma3-270m"].profile)
    assert prof.methods == {"rome": {"objective": {"weight_decay": 2}},
                            "mobiedit": {"quant": {"head_matmul": "bf16"}}} and prof.objective == {}
    for key in ("tune:rome", "tune:mobiedit"):
        assert set(prof.notes[key]["case_ids"]) <= set(prof.notes["tune"]["case_ids"])
    q = QuantConfig(**prof.methods["mobiedit"]["quant"])
    assert (q.scheme, q.head_matmul) == ("w8a16", "bf16")  # the shipped W8A16 body, the read-out's differences in bf16
