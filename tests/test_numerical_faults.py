"""Numerical faults stop an edit with NumericalError and leave the model (and journal) untouched;
an edit that misses its success criterion is not applied unless forced, and the output says so.
Also: sequential editing with bit-exact undo (mobiedit.sequential) on a tiny model."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest
import torch

from mobiedit.errors import NumericalError
from mobiedit.journal import Journal, tensor_sha256

NAN, INF = float("nan"), float("inf")


@pytest.fixture(scope="module")
def lm(tiny_llama_dir):
    from mobiedit.models import load_model

    return load_model(tiny_llama_dir)


@pytest.fixture(scope="module")
def reqs():
    from mobiedit.requests import bundled_path, load_requests

    return load_requests(bundled_path("counterfact-edit-1k.json"))[:2]


def _ctx(lm, layer=0, stats=None):
    """Context templates (2 short ones) and, if given, key statistics for ``layer``."""
    from mobiedit.methods.common import prepare_context
    from mobiedit.editing.config import ContextConfig

    ctx = prepare_context(lm, [layer], ContextConfig(lengths=((2, 2),)), None, torch.Generator().manual_seed(0))
    if stats is not None:
        ctx.mom2[layer] = stats
    return ctx


def _mobiedit_cfg(**zo):
    from mobiedit.methods.mobiedit import MobiEditConfig
    from mobiedit.editing.config import ContextConfig
    from mobiedit.zo import ZOConfig

    z = dict(estimator="fzoo", n_dirs=4, h=0.05, optimizer="adam", lr=0.5, max_steps=6, seed=0) | zo
    return MobiEditConfig(layer=0, context=ContextConfig(lengths=((2, 2),)), zo=ZOConfig(**z), early_stop=False)


def _rome_cfg(**kw):
    from mobiedit.editing.config import ContextConfig, ROMEConfig

    return ROMEConfig(**(dict(layer=0, steps=3, context=ContextConfig(lengths=((2, 2),))) | kw))


def _digests(model) -> dict[str, str]:
    return {k: tensor_sha256(p) for k, p in model.state_dict().items()}


def _edit_fails_untouched(lm, req, cfg, ctx, journal_dir, match):
    """Run one journaled sequential edit that must raise NumericalError; check nothing changed."""
    from mobiedit.session import edit_sequential

    before = _digests(lm.model)
    journal = Journal.open(journal_dir)
    with pytest.raises(NumericalError, match=match) as info:
        edit_sequential(lm, [req], cfg, ctx, journal, force=True, progress=False)
    assert _digests(lm.model) == before, "the model changed"
    assert Journal.open(journal_dir).entries() == [] and sorted(p.name for p in journal_dir.iterdir()) == [
        "journal.jsonl"], "the journal changed"
    return info.value


# ----------------------------------------------------------------------------- NaN losses

@pytest.fixture
def poison_graph(monkeypatch):
    """Make the forward-only graph return ``value`` losses from its ``after``-th call on; records
    which ZO backend ran."""
    from mobiedit import zo
    from mobiedit.methods import mobiedit as mobiedit_method

    backends = []
    real_native = zo.run_native

    def spy(*a, **k):
        backends.append("native")
        return real_native(*a, **k)

    monkeypatch.setattr(zo, "run_native", spy)

    def arm(value, after=0, alternate=False):
        real = mobiedit_method.build_graph
        calls = [0]

        def poisoned(*a, **k):
            graph, state, inputs = real(*a, **k)

            class Poisoned:  # a driver.EditGraph: the real graph's sizes, poisoned losses
                n_rows, n_rewrite, target_len = graph.n_rows, graph.n_rewrite, graph.target_len

                def __call__(self, D):
                    losses, correct = graph(D)
                    calls[0] += 1
                    if calls[0] > after:
                        losses = torch.full_like(losses, value)
                        if alternate:
                            losses[1::2] = -value
                    return losses, correct
            return Poisoned(), state, inputs

        monkeypatch.setattr(mobiedit_method, "build_graph", poisoned)
        return backends

    return arm


@pytest.mark.parametrize("after", [0, 3], ids=["first-step", "later-step"])
def test_nan_loss_in_native_zo_search_stops_the_edit(lm, reqs, tmp_path, poison_graph, after):
    backends = poison_graph(NAN, after)
    err = _edit_fails_untouched(lm, reqs[0], _mobiedit_cfg(), _ctx(lm), tmp_path / "j", "non-finite loss")
    assert backends == ["native"] and err.where == "zo loop"


def test_inf_delta_in_native_zo_search_stops_the_edit(lm, reqs, tmp_path, poison_graph):
    """Losses of +-3e38 make the estimated gradient and the updated delta overflow."""
    backends = poison_graph(3e38, 0, alternate=True)
    cfg = _mobiedit_cfg(estimator="paper", optimizer="sgd", lr=1e30)
    _edit_fails_untouched(lm, reqs[0], cfg, _ctx(lm), tmp_path / "j", "non-finite")
    assert backends == ["native"]


@pytest.mark.parametrize("estimator", ["paper", "fzoo"])
def test_native_engine_reports_nonfinite_delta(estimator):
    from mobiedit.zo import ZOConfig, ZOStatus, run_zo

    def forward(D):
        return np.where(D[:, 0] > 0, 3e38, -3e38).astype(np.float32)

    x0 = np.zeros(6, np.float32)
    res = run_zo(forward, None, x0, ZOConfig(estimator=estimator, n_dirs=4, optimizer="sgd", lr=1e30, seed=1),
                 backend="native")
    assert res.status is ZOStatus.NONFINITE and "non-finite delta" in res.message
    assert np.all(np.isfinite(res.x))  # the last finite delta, never the overflowed one
    with pytest.raises(NumericalError, match="non-finite delta"):
        res.raise_for_status()


# ----------------------------------------------------------------------------- statistics and deltas

@pytest.mark.parametrize("fill", [NAN, INF])
@pytest.mark.parametrize("method", ["rome", "mobiedit"])
def test_non_finite_key_statistics_stop_the_edit(lm, reqs, tmp_path, method, fill):
    d_in = lm.model.get_submodule("model.layers.0.mlp.down_proj").weight.shape[1]
    stats = torch.eye(d_in)
    stats[3, 3] = fill
    cfg = _rome_cfg() if method == "rome" else _mobiedit_cfg(max_steps=2)
    _edit_fails_untouched(lm, reqs[0], cfg, _ctx(lm, stats=stats), tmp_path / "j", "rank-one")


def test_singular_key_statistics_stop_the_edit(lm, reqs, tmp_path):
    """All-zero statistics (a dead layer): C is singular even with the relative ridge."""
    d_in = lm.model.get_submodule("model.layers.0.mlp.down_proj").weight.shape[1]
    _edit_fails_untouched(lm, reqs[0], _rome_cfg(), _ctx(lm, stats=torch.zeros(d_in, d_in)), tmp_path / "j",
                          "singular|non-finite|degenerate")


@pytest.mark.parametrize("fill", [NAN, INF])
def test_non_finite_rome_delta_stops_the_edit(lm, reqs, tmp_path, monkeypatch, fill):
    from mobiedit.methods import rome

    real = rome.compute_v

    def bad_v(*a, **k):
        vr = real(*a, **k)
        delta = vr.delta.clone()
        delta[0] = fill
        return dataclasses.replace(vr, delta=delta, v_star=vr.v_init + delta)

    monkeypatch.setattr(rome, "compute_v", bad_v)
    _edit_fails_untouched(lm, reqs[0], _rome_cfg(), _ctx(lm), tmp_path / "j", "rank-one")


def test_nan_rome_loss_stops_the_edit(lm, reqs, tmp_path, monkeypatch):
    """A NaN objective poisons Adam's delta; the edit stops before anything is written."""
    from mobiedit.editing import compute_v as cv

    real = cv.value_loss
    monkeypatch.setattr(cv, "value_loss", lambda *a, **k: real(*a, **k) * NAN)
    _edit_fails_untouched(lm, reqs[0], _rome_cfg(), _ctx(lm), tmp_path / "j", "rank-one")


def test_finite_factors_that_overflow_the_weight_are_not_applied(lm, reqs, tmp_path, monkeypatch):
    """u, w finite but u w^T overflows float32: the journal refuses them and the model is kept."""
    from mobiedit.methods import rome

    real = rome.rome_edit

    def huge(*a, **k):
        out = real(*a, **k)
        return dataclasses.replace(out, u=torch.full_like(out.u, 3e38), w=torch.full_like(out.w, 1e10))

    from mobiedit.methods import METHODS

    monkeypatch.setitem(METHODS, "rome", (METHODS["rome"][0], huge))  # the session looks methods up here
    _edit_fails_untouched(lm, reqs[0], _rome_cfg(), _ctx(lm), tmp_path / "j", "overflow")


# ----------------------------------------------------------------------------- through the CLI

def _cli(*args):
    from mobiedit.cli import main

    return main(["--quiet", *args])


@pytest.fixture
def one_step_config(tmp_path):
    """A ROME config that cannot reach its success criterion: a single Adam step."""
    path = tmp_path / "one_step.yaml"
    path.write_text("steps: 2\n")  # one Adam step (steps: 1 would be a zero update)
    return path


def test_edit_that_misses_is_not_applied_unless_forced(tiny_llama_dir, cache_dir, tmp_path, capsys, one_step_config):
    from mobiedit.models import load_model
    from mobiedit.requests import bundled_path

    base = _digests(load_model(tiny_llama_dir).model)
    common = ["edit", "--model", str(tiny_llama_dir), "--requests", str(bundled_path("counterfact-edit-1k.json")),
              "--limit", "1", "--method", "rome", "--layer", "0", "--config", str(one_step_config)]
    rc = _cli(*common, "--out", str(tmp_path / "out"))
    out = capsys.readouterr().out
    assert rc == 1, out
    assert "3087: MAX_STEPS applied=False" in out
    assert "1 edit(s) not applied (missed the success criterion; --force applies them)" in out
    assert Journal.open(tmp_path / "out" / "journal").entries() == []
    assert _digests(load_model(tmp_path / "out").model) == base

    rc = _cli(*common, "--force", "--out", str(tmp_path / "forced"))
    out = capsys.readouterr().out
    assert rc == 0 and "3087: MAX_STEPS applied=True" in out and "not applied" not in out
    entries = Journal.open(tmp_path / "forced" / "journal").entries()
    assert len(entries) == 1 and entries[0].metrics["succeeded"] is False
    edited = _digests(load_model(tmp_path / "forced").model)
    assert [k for k in base if base[k] != edited[k]] == ["model.layers.0.mlp.down_proj.weight"]


def test_cli_nan_statistics_exit_2_and_write_nothing(tiny_llama_dir, tmp_path, capsys, monkeypatch):
    """Key statistics that come back NaN (e.g. a damaged cache): exit code 2, one line naming the
    rank-one update, no output folder, no temporaries, input model untouched."""
    from tools.reliability.killtest import folder_digest, temps_in
    from mobiedit.editing import stats

    monkeypatch.setenv("MOBIEDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(stats, "second_moment_counted", lambda model, family, layer, *a, **k: (torch.full(
        (model.get_submodule(family.mlp_out.format(layer)).weight.shape[1],) * 2, NAN), 1))
    before = folder_digest(tiny_llama_dir)
    out = tmp_path / "runs" / "out"
    rc = _cli("edit", "--model", str(tiny_llama_dir), "--subject", "Danielle Darrieux", "--prompt",
              "The mother tongue of Danielle Darrieux is", "--target", "English", "--method", "rome", "--layer", "0",
              "--force", "--out", str(out))
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and err[-1].startswith("mobiedit: error: rank-one update:"), err
    assert not out.exists() and temps_in(out.parent) == []
    assert folder_digest(tiny_llama_dir) == before


# ----------------------------------------------------------------------------- sequential editing

def test_sequential_edits_table_and_bit_exact_undo(tiny_llama_dir, cache_dir, tmp_path, capsys):
    from mobiedit.sequential import main

    out = tmp_path / "seq.json"
    rc = main(["--model", str(tiny_llama_dir), "--layer", "0", "--n", "4", "--checkpoints", "1", "2", "4",
               "--method", "rome", "--force", "--undo", "3", "--probe", "3", "--out", str(out), "--quiet"])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    res = json.loads(out.read_text())["rows"][0]  # the result file: one entry per row
    assert [r["edits"] for r in res["table"]] == [1, 2, 4]
    assert [r["applied"] for r in res["table"]] == [1, 2, 4]  # --force applies every edit
    for row in res["table"]:
        assert 0.0 <= row["efficacy_acc"] <= 100.0 and 0.0 <= row["locality_acc"] <= 100.0
        assert not math.isnan(row["probe_locality_acc"]) and row["weight_drift"] > 0
    drift = [r["weight_drift"] for r in res["table"]]
    assert drift[0] < drift[-1]
    u = res["undo"]
    assert u["random_undos"] == 3 and u["bit_exact"] == 3
    assert u["other_params_untouched"] and u["undo_all_restores_unedited_model"]
    assert "undo: 3/3 random undos bit-exact" in printed and "eff acc" in printed


def test_sequential_undo_check_detects_a_wrong_rebuild(tiny_llama_dir, cache_dir, monkeypatch):
    """The bit-exact check can fail: an undo that is off by one ulp is reported."""
    from mobiedit.journal import Journal as J
    from mobiedit.sequential import run_sequential

    real = J.rebuild

    def sloppy(self, module, skip=None):
        w = real(self, module, skip)
        return torch.nextafter(w, torch.full_like(w, INF)) if skip is not None else w

    monkeypatch.setattr(J, "rebuild", sloppy)
    res = run_sequential(tiny_llama_dir, 2, "rome", 0, (1, 2), force=True, n_undo=1, probe=1)
    assert res["undo"]["bit_exact"] == 0
