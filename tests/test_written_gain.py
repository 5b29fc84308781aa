"""Search at the keys that are written (issue 18, ``UpdateConfig.written_gain``): the search graph
adds ``δ·(wᵀk_b)`` at row b — what the rank-one update will deliver there — not δ at every row."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from mobiedit.editing.config import ContextConfig, ObjectiveConfig, ROMEConfig, UpdateConfig
from mobiedit.editing.context import build_edit_inputs
from mobiedit.forward.graph import FullGraph, PrefixGraph
from mobiedit.forward.prefix import compute_prefix_state
from mobiedit.methods.rome import edit_keys, factors_from_delta, search_keys
from mobiedit.methods.verify import check_written
from mobiedit.models import load_model
from mobiedit.requests import EditRequest
from mobiedit.session import prepare, run_method

REQ = EditRequest(case_id="g1", prompt="{} professionally plays the sport", subject="David Robinson",
                  target_new="baseball", target_true="basketball")
CTX = ContextConfig(lengths=((4, 3),))
GAIN = UpdateConfig(written_gain=True)


@pytest.fixture(scope="module")
def setup(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    cfg = ROMEConfig(layer=0, steps=20, mom2_adjustment=False, context=CTX, update=GAIN)
    ctx = prepare(lm, cfg, seed=0)
    inputs = build_edit_inputs(lm.tokenizer, REQ, ctx.templates, cfg.objective)
    keys, gains = search_keys(lm, ctx, REQ, 0, cfg.mom2_ridge, GAIN, inputs)
    return lm, cfg, ctx, inputs, keys, gains


def test_search_keys_are_edit_keys_from_one_forward(setup):
    lm, cfg, ctx, inputs, keys, gains = setup
    ref = edit_keys(lm, ctx, REQ, 0, cfg.mom2_ridge, GAIN)  # two forwards of the prompts alone
    for a, b in [(keys.k_bar, ref.k_bar), (keys.k_cur, ref.k_cur), (keys.out_cur, ref.out_cur),
                 (keys.direction, ref.direction)]:
        assert torch.allclose(a, b, rtol=1e-4, atol=1e-5)
    # templates without "{}": the keys are taken apart, the gains still read the rows
    odd = dataclasses.replace(ctx, templates=[t for t in ctx.templates if t != "{}"])
    odd_inputs = build_edit_inputs(lm.tokenizer, REQ, odd.templates, cfg.objective)
    k2, g2 = search_keys(lm, odd, REQ, 0, cfg.mom2_ridge, GAIN, odd_inputs)
    assert torch.allclose(k2.k_cur, ref.k_cur, atol=1e-5) and g2.shape == (odd_inputs.batch.input_ids.shape[0],)
    assert search_keys(lm, ctx, REQ, 0, cfg.mom2_ridge, UpdateConfig(), inputs) == (None, None)


def test_gains_are_what_the_written_update_delivers(setup):
    lm, cfg, ctx, inputs, keys, g = setup
    assert g.shape == (inputs.batch.input_ids.shape[0],)
    assert abs(float(g[0]) - 1) < 1e-5  # the plain prompt: the update is solved at its key
    delta = torch.randn(keys.out_cur.shape[0], generator=torch.Generator().manual_seed(0))
    u, w, _ = factors_from_delta(lm, ctx, REQ, 0, delta, cfg.mom2_ridge, GAIN, keys)
    # the verify-after-write error |wᵀk_i − 1| at the templates' keys is |gain − 1| of those rows
    from mobiedit.methods.common import EditOutcome

    out = EditOutcome(method="rome", layer=0, module="m", u=u, w=w, succeeded=True, status="x", loss_evals=0,
                      sequences=0, forward_calls=0, backward_calls=0, wall_time=0.0, losses=[])
    chk = check_written(lm, REQ, out, ctx, cfg.objective, cfg.success_fraction, None)
    n = inputs.n_rewrite
    assert chk.write_error_templates_mean == pytest.approx(float((g[:n] - 1).abs().mean()), rel=1e-3, abs=1e-5)
    assert float((g[:n] - 1).abs().max()) > 1e-3  # the templates' keys do differ: the option matters here


def test_graphs_apply_the_gains_and_prefix_stays_exact(setup):
    lm, cfg, ctx, inputs, keys, gains = setup
    obj = ObjectiveConfig()
    st = compute_prefix_state(lm.model, lm.family, 0, inputs)
    assert torch.equal(compute_prefix_state(lm.model, lm.family, 0, inputs, row_gain=gains).row_gain, gains)
    D = torch.randn(3, st.h_suffix.shape[-1], generator=torch.Generator().manual_seed(1)) * float(st.v_init.norm())
    plain = PrefixGraph(lm.model, lm.family, st, obj)(D)
    ones = PrefixGraph(lm.model, lm.family, dataclasses.replace(st, row_gain=torch.ones_like(gains)), obj)(D)
    assert torch.equal(plain[0], ones[0])
    sg = dataclasses.replace(st, row_gain=gains)
    pre = PrefixGraph(lm.model, lm.family, sg, obj)(D)
    full = FullGraph(lm.model, lm.family, 0, inputs, sg, obj)(D)
    assert torch.allclose(pre[0], full[0], atol=1e-4) and torch.equal(pre[1], full[1])
    # a gain of 2 on every row is the plain graph at 2δ (no decay term: it reads ‖δ‖, not the rows)
    obj0 = dataclasses.replace(obj, weight_decay=0.0)
    twice = PrefixGraph(lm.model, lm.family, dataclasses.replace(st, row_gain=torch.full_like(gains, 2.0)), obj0)(D)
    ref = PrefixGraph(lm.model, lm.family, st, obj0)(2 * D)
    assert torch.allclose(twice[0], ref[0], rtol=1e-5) and not torch.allclose(twice[0], plain[0], rtol=1e-3)


@pytest.mark.parametrize("lean", [False, True])
def test_rome_with_written_gain_runs_on_both_graphs(setup, lean):
    lm, cfg, ctx, _, _, _ = setup
    out = run_method(lm, REQ, dataclasses.replace(cfg, prefix_reuse=lean), ctx)
    assert out.u.shape[0] == lm.model.config.hidden_size and torch.isfinite(out.w).all()
    assert isinstance(out.loop_holds, bool) and out.write["write_error_plain"] < 1e-4


def test_key_source_names_where_the_keys_are_read(setup):
    """``served`` reads the keys from the float weights that serve the edit (exact there: the plain
    prompt's write error ~0); ``search`` from the quantized forward copy the search ran on (the
    float model then sees the write through other keys)."""
    from mobiedit.errors import ConfigError
    from mobiedit.forward.quant import QuantConfig, quantized_copy
    from mobiedit.methods.rome import key_model

    lm, cfg, ctx, inputs, _, _ = setup
    q = quantized_copy(lm.model, lm.family, 0, QuantConfig("w8a8"))
    assert key_model(lm, q, UpdateConfig()) is lm and key_model(lm, None, UpdateConfig(key_source="search")) is lm
    assert key_model(lm, q, UpdateConfig(key_source="search")).model is q
    served, searched = (dataclasses.replace(cfg, quant=QuantConfig("w8a8"), update=UpdateConfig(key_source=s))
                        for s in ("served", "search"))
    out_s, out_q = (run_method(lm, REQ, c, ctx) for c in (served, searched))
    assert out_s.write["write_error_plain"] < 1e-4
    assert out_q.write["write_error_plain"] > 10 * out_s.write["write_error_plain"]
    with pytest.raises(ConfigError, match="key source"):
        UpdateConfig(key_source="float")
