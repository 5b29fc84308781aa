"""Multi-layer spreading (issue 16, MEMIT's form, ``update.spread``): the searched value change
written over consecutive layers, the top layer's hidden state reaching the target, one journal
entry per layer with bit-exact undo, and the refusals."""
from __future__ import annotations

import shutil

import pytest
import torch

from mobiedit.editing.config import ContextConfig, ROMEConfig, UpdateConfig, written_layers
from mobiedit.errors import ConfigError


def test_written_layers_end_at_the_edit_layer_and_are_checked():
    assert written_layers(3, UpdateConfig()) == (3,)
    assert written_layers(3, UpdateConfig(spread=3)) == (1, 2, 3)
    with pytest.raises(ConfigError, match="update.spread"):
        written_layers(1, UpdateConfig(spread=3))
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ConfigError, match="update.spread"):
            UpdateConfig(spread=bad)


def _session(tiny_llama_dir, tmp_path, spread: int):
    from mobiedit.journal import Journal
    from mobiedit.models import load_model
    from mobiedit.session import EditSession, prepare

    folder = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "mobiedit.json").write_text('{"edit_layer": 1, "stats_corpus": "counterfact"}')
    lm = load_model(folder)
    cfg = ROMEConfig(layer=1, steps=8, context=ContextConfig(lengths=((4, 2),)), update=UpdateConfig(spread=spread))
    ctx = prepare(lm, cfg, seed=0)
    assert sorted(ctx.mom2) == list(written_layers(1, cfg.update))  # statistics of every written layer
    return lm, cfg, ctx, EditSession.open(lm, cfg, ctx, Journal.open(tmp_path / "j"))


def _reqs():
    from mobiedit.requests import EditRequest

    return [EditRequest(case_id=f"s{i}", prompt="{} plays the sport", subject=s, target_new=t, target_true="golf")
            for i, (s, t) in enumerate((("Anna Lee", "tennis"), ("Bo Chen", "hockey"), ("Cy Diaz", "rugby")))]


def test_a_spread_edit_reaches_the_target_at_the_top_layer_and_each_layer_moves_less(tiny_llama_dir, tmp_path):
    from mobiedit.session import run_method
    from mobiedit.spread import block_output_at_subject, spread_parts, spread_written

    lm, cfg, ctx, session = _session(tiny_llama_dir, tmp_path, 2)
    req = _reqs()[0]
    out = run_method(lm, req, cfg, ctx, session.fwd_model)  # the search, judged on one layer
    weights = [session.weight(i).detach().clone() for i in (0, 1)]
    h0 = block_output_at_subject(lm.model, lm.family, 1, lm.tokenizer, req.rewrite_prompt, req.subject)
    parts, miss = spread_parts(lm, ctx, req, out, (0, 1), cfg.mom2_ridge, cfg.update)
    h1 = block_output_at_subject(lm.model, lm.family, 1, lm.tokenizer, req.rewrite_prompt, req.subject)
    assert torch.allclose(h1, h0 + out.delta, atol=1e-4 * float(out.delta.norm()) + 1e-5) and miss < 1e-4
    assert [p.layer for p in parts] == [0, 1] and [p.config["spread_part"] for p in parts] == [0, 1]
    one_layer = float(out.u.norm() * out.w.norm())  # the whole change in one matrix
    assert all(float(p.u.norm() * p.w.norm()) < one_layer for p in parts)
    with torch.no_grad():
        for i, w in zip((0, 1), weights):
            session.weight(i).copy_(w)
    # spread_written leaves the model as it was and reports the spread write's own verdict
    top = spread_written(session, req, out, force=True)
    assert all(torch.equal(session.weight(i), w) for i, w in zip((0, 1), weights))
    assert [p.layer for p in top.parts] == [0, 1] and top.write["spread_miss"] < 1e-4
    assert torch.equal(top.u, top.parts[-1].u) and torch.equal(top.delta, out.delta)  # the edit keeps its search's δ
    assert top.forward_calls > out.forward_calls and top.loop_succeeded == out.loop_succeeded
    assert top.succeeded == top.write["spread_holds"] and top.write["one_layer_holds"] == out.succeeded


def test_the_clamp_ladder_climbs_on_the_spread_write_not_the_one_layer_write(tiny_llama_dir, tmp_path):
    """Each rung is judged as written: a judge that refuses the first rung makes the ladder try
    the second, whatever the one-layer write did."""
    import dataclasses

    from mobiedit.session import run_method

    lm, cfg, ctx, session = _session(tiny_llama_dir, tmp_path, 2)
    req = _reqs()[0]
    laddered = dataclasses.replace(cfg, update=dataclasses.replace(cfg.update, clamp_ladder=(4.0, 8.0)))
    seen = []

    def judge(out):
        seen.append(out.succeeded)
        return dataclasses.replace(out, succeeded=len(seen) > 1)

    out = run_method(lm, req, laddered, ctx, session.fwd_model, judge=judge)
    assert len(seen) == 2 and out.config["ladder_tries"] == 2 and out.succeeded


def test_a_spread_session_edit_carries_the_spread_verdict_and_its_parts(small_fact_lm):
    """On the small fact LM (an edit there holds): the session's edit is judged as the spread
    write — its verdict, the parts it was judged on, the search's δ — and the model is untouched."""
    from mobiedit.models import load_model
    from mobiedit.requests import bundled_path, load_requests
    from mobiedit.session import EditSession, prepare, written_parts

    lm = load_model(small_fact_lm)
    req = load_requests(bundled_path("counterfact-edit-1k.json"))[0]
    cfg = ROMEConfig(layer=1, update=UpdateConfig(spread=2, clamp_ladder=(2.0, 4.0)))
    session = EditSession.open(lm, cfg, prepare(lm, cfg, seed=0))
    w0 = [session.weight(i).detach().clone() for i in (0, 1)]
    edit = session.edit(req)
    assert edit.loop_succeeded and [p.layer for p in edit.parts] == [0, 1] and edit.parts[-1].layer == edit.layer
    assert edit.succeeded == edit.write["spread_holds"] and "one_layer_holds" in edit.write
    assert edit.config["ladder_tries"] >= 1 and float(edit.delta.norm()) > float(edit.parts[-1].delta.norm())
    assert written_parts(session, req, edit)[1] == list(edit.parts)
    assert all(p.config["ladder_tries"] == edit.config["ladder_tries"] for p in edit.parts)  # journaled per part
    assert all(torch.equal(session.weight(i), w) for i, w in zip((0, 1), w0))


def test_a_sequential_session_journals_one_entry_per_layer_and_undo_is_bit_exact(tiny_llama_dir, tmp_path):
    from mobiedit.session import edit_sequential

    lm, cfg, ctx, session = _session(tiny_llama_dir, tmp_path, 2)
    w0 = [session.weight(i).detach().clone() for i in (0, 1)]
    j = session.journal
    recs = edit_sequential(lm, _reqs(), cfg, ctx, j, force=True, progress=False)
    assert all(r.applied for r in recs)
    entries = j.entries()
    assert [e.layer for e in entries] == [0, 1] * 3 and len(ctx.edited_keys[0]) == len(ctx.edited_keys[1]) == 3
    assert {e.config["spread"] for e in entries} == {2}
    j.undo(entries[0].id, lm.model, lm.family)  # one part of the first edit: the rest stays as solved
    for i in (0, 1):
        assert torch.equal(session.weight(i), j.rebuild(f"model.layers.{i}.mlp.down_proj"))
    for e in j.entries(active_only=True):
        j.undo(e.id, lm.model, lm.family)
    assert all(torch.equal(session.weight(i), w) for i, w in zip((0, 1), w0))


def test_spread_is_refused_where_it_cannot_be_written(tiny_llama_dir, tmp_path):
    import dataclasses

    from mobiedit.batch import edit_batched
    from mobiedit.session import edit_independent
    from mobiedit.spread import check_spreadable

    lm, cfg, ctx, session = _session(tiny_llama_dir, tmp_path, 2)
    with pytest.raises(ConfigError, match="update.spread"):
        edit_independent(lm, _reqs()[:1], cfg, ctx, progress=False)
    with pytest.raises(ConfigError, match="update.spread"):
        edit_batched(lm, _reqs()[:2], cfg, ctx, None, 2, progress=False)
    normed = dataclasses.replace(lm, family=dataclasses.replace(lm.family, mlp_post_norm="model.layers.{}.post_norm"))
    with pytest.raises(ConfigError, match="norms the MLP output"):
        check_spreadable(normed, (0, 1))
