"""EditSession owns the per-model state: one quantized forward model per session (not one per
request), the weight write, and the forward model's float copy of the edited matrix kept in step —
with results bit-identical to rebuilding the quantized model before every request."""
from __future__ import annotations

import dataclasses

import pytest
import torch


@pytest.fixture()
def setup(tiny_llama_dir, cache_dir, tmp_path):
    import shutil

    from mobiedit.editing.config import ContextConfig
    from mobiedit.methods.mobiedit import MobiEditConfig
    from mobiedit.models import load_model
    from mobiedit.requests import EditRequest
    from mobiedit.session import prepare

    folder = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "mobiedit.json").write_text('{"edit_layer": 0, "stats_corpus": "counterfact"}')
    lm = load_model(folder)
    base = MobiEditConfig()
    cfg = dataclasses.replace(base, layer=0, context=ContextConfig(lengths=((4, 2),)),
                              zo=dataclasses.replace(base.zo, max_steps=6, max_evals=200))
    ctx = prepare(lm, cfg, seed=0)
    reqs = [EditRequest(case_id=f"s{i}", prompt="{} plays the sport", subject=s, target_new=t, target_true="golf")
            for i, (s, t) in enumerate((("Anna Lee", "tennis"), ("Bo Chen", "hockey"), ("Cy Diaz", "rugby")))]
    return lm, cfg, ctx, reqs


def _count_copies(monkeypatch) -> list[int]:
    from mobiedit.methods import mobiedit as method

    calls = [0]
    real = method.quantized_copy

    def counted(*a, **k):
        calls[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(method, "quantized_copy", counted)
    return calls


def test_sequential_session_quantizes_once_and_matches_a_rebuild_per_request(setup, monkeypatch, tmp_path):
    from mobiedit.journal import Journal
    from mobiedit.session import apply_outcome, edit_sequential, run_method

    lm, cfg, ctx, reqs = setup
    w0 = lm.model.model.layers[0].mlp.down_proj.weight.detach().clone()
    # the reference: the forward model rebuilt from the edited float model before every request
    ref = []
    for req in reqs:
        out = run_method(lm, req, cfg, ctx)
        apply_outcome(lm, out)
        ref.append(out)
    w_ref = lm.model.model.layers[0].mlp.down_proj.weight.detach().clone()
    with torch.no_grad():
        lm.model.model.layers[0].mlp.down_proj.weight.copy_(w0)

    calls = _count_copies(monkeypatch)
    recs = edit_sequential(lm, reqs, cfg, ctx, Journal.open(tmp_path / "j"), force=True, progress=False)
    assert calls[0] == 1, "one quantized copy for the whole session"
    assert [r.outcome.losses for r in recs] == [o.losses for o in ref]
    for r, o in zip(recs, ref):
        assert torch.equal(r.outcome.u, o.u) and torch.equal(r.outcome.w, o.w)
    assert torch.equal(lm.model.model.layers[0].mlp.down_proj.weight, w_ref)


def test_independent_session_restores_model_and_forward_copy(setup, monkeypatch):
    from mobiedit.session import EditSession, edit_independent, forward_model_for

    lm, cfg, ctx, reqs = setup
    w0 = lm.model.model.layers[0].mlp.down_proj.weight.detach().clone()
    fwd = forward_model_for(lm, cfg)
    assert fwd is not lm.model  # w8a16: a quantized copy whose edit matrix stays float
    recs = edit_independent(lm, reqs[:2], cfg, ctx, progress=False, fwd_model=fwd)
    assert len(recs) == 2 and torch.equal(lm.model.model.layers[0].mlp.down_proj.weight, w0)
    assert torch.equal(fwd.model.layers[0].mlp.down_proj.weight, w0)
    # an applied edit reaches the forward copy too (the next search sees the edited matrix)
    s = EditSession.open(lm, cfg, ctx, fwd_model=fwd)
    s.apply(reqs[0], recs[0].outcome)
    assert torch.equal(fwd.model.layers[0].mlp.down_proj.weight, lm.model.model.layers[0].mlp.down_proj.weight)
    assert not torch.equal(fwd.model.layers[0].mlp.down_proj.weight, w0)
    s.restore(0, w0)
    assert torch.equal(fwd.model.layers[0].mlp.down_proj.weight, w0)
