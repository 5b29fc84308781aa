"""The library API (mobiedit.api): one edit of the small fact LM written to a folder that then says
the new target; bad names are ConfigErrors naming the field; the method table is the one the
session and the CLI use."""
from __future__ import annotations

import json

import pytest
import torch

from mobiedit import api
from mobiedit.errors import ConfigError
from mobiedit.evaluate import greedy_exact
from mobiedit.methods import METHODS
from mobiedit.requests import bundled_path, load_requests


@pytest.fixture(scope="module")
def request_0():
    """The first bundled CounterFact request (ROME on the small fact LM edits it in ~6 s)."""
    return load_requests(bundled_path("counterfact-edit-1k.json"))[0]


def _says(lm, req) -> bool:
    return greedy_exact(lm.model, lm.tokenizer, [req.rewrite_prompt], [req.target_new])[0][0]


def test_edit_through_the_api_makes_the_model_say_the_target(small_fact_lm, request_0, tmp_path):
    torch.set_num_threads(1)
    assert not _says(api.load_model(small_fact_lm), request_0)
    out = tmp_path / "edited"
    [rec] = api.edit(small_fact_lm, [request_0], method="rome", out=out, score=True)
    assert rec.applied and rec.outcome.method == "rome" and rec.outcome.succeeded, rec.outcome.summary()
    assert rec.scores is not None and rec.scores.efficacy_acc == 1.0  # a share per request
    edited = api.load_model(out)
    assert _says(edited, request_0)
    assert len((out / "journal" / "journal.jsonl").read_text().splitlines()) == 1
    assert json.loads((out / "mobiedit.json").read_text()) == json.loads((small_fact_lm / "mobiedit.json").read_text())
    ev = api.evaluate(edited, [request_0])
    assert ev.against_pre_edit and ev.aggregate["efficacy_acc"] == pytest.approx(100.0)
    assert not _says(api.load_model(small_fact_lm), request_0)  # the source folder is untouched
    # one edit: the objective's clamp as configured; a further edit of the edited folder is the
    # second on that model, tried with the sequential clamp ladder (session.sequential_config)
    assert "clamp_norm_factor" not in rec.outcome.config
    from mobiedit.requests import bundled_path, load_requests

    [rec2] = api.edit(out, load_requests(bundled_path("counterfact-edit-1k.json"))[1:2], method="rome")
    assert rec2.outcome.config["clamp_norm_factor"] in (2.0, 3.0, 4.0), rec2.outcome.config


def test_a_bad_method_name_is_a_config_error_naming_the_field(small_fact_lm, request_0, tmp_path):
    with pytest.raises(ConfigError) as e:
        api.load_method_config("memit")
    assert e.value.where == "method" and "'memit'" in str(e.value) and "rome" in e.value.fix
    with pytest.raises(ConfigError) as e:
        api.edit(small_fact_lm, [request_0], method="memit", out=tmp_path / "o")
    assert e.value.where == "method"
    assert not (tmp_path / "o").exists()
    with pytest.raises(ConfigError) as e:  # a config of the other method
        api.edit(small_fact_lm, [request_0], method="rome", config=api.load_method_config("mobiedit"))
    assert e.value.where == "method"


def test_a_config_layer_that_is_not_the_runs_is_refused_by_name(small_fact_lm, request_0, tmp_path):
    """A YAML ``layer`` was silently replaced by the profile's (session 35, by hand: ``layer: 3``
    edited layer 1); now it is refused unless it is the run's layer, before anything is written."""
    from mobiedit.profile import resolve_layer
    from mobiedit.resolve import method_config

    profile_layer = resolve_layer(small_fact_lm, None)
    other = tmp_path / "other.yaml"
    other.write_text(f"layer: {profile_layer + 1}\nsteps: 1\n")
    with pytest.raises(ConfigError) as e:
        api.edit(small_fact_lm, [request_0], method="rome", config=other, out=tmp_path / "o")
    assert e.value.where == f"{other}, field 'layer'" and f"--layer {profile_layer + 1}" in e.value.fix
    assert not (tmp_path / "o").exists()
    with pytest.raises(ConfigError):  # the sequential and bench rows' path too
        method_config("rome", profile_layer, str(other), 0, small_fact_lm)
    # the same layer given to the run, or the profile's layer in the file, is taken
    assert method_config("rome", profile_layer + 1, str(other), 0, small_fact_lm).layer == profile_layer + 1
    same = tmp_path / "same.yaml"
    same.write_text(f"layer: {profile_layer}\n")
    assert method_config("rome", profile_layer, str(same), 0, small_fact_lm).layer == profile_layer


def test_load_method_config_merges_yaml_and_overrides(tmp_path):
    y = tmp_path / "c.yaml"
    y.write_text("zo:\n  lr: 0.3\n")
    cfg = api.load_method_config("mobiedit", y, {"zo": {"n_dirs": 8}, "layer": 2})
    shipped = api.load_method_config("mobiedit")
    assert (cfg.zo.lr, cfg.zo.n_dirs, cfg.layer) == (0.3, 8, 2)
    assert (cfg.zo.estimator, cfg.zo.h, cfg.zo.max_steps) == (shipped.zo.estimator, shipped.zo.h, shipped.zo.max_steps)
    assert type(api.load_method_config("rome")) is METHODS["rome"][0]
    with pytest.raises(ConfigError) as e:
        api.load_method_config("rome", overrides={"stepz": 3})
    assert "stepz" in str(e.value)


def test_one_method_table():
    from mobiedit.cli.edit import METHOD_NAMES
    from mobiedit.editing.config import ROMEConfig
    from mobiedit.methods.mobiedit import MobiEditConfig, mobiedit_edit
    from mobiedit.methods.rome import rome_edit

    assert METHODS == {"rome": (ROMEConfig, rome_edit), "mobiedit": (MobiEditConfig, mobiedit_edit)}
    assert METHOD_NAMES == tuple(METHODS)  # the CLI's --method choices (kept light: no torch at --help)
