"""Verify after write (issue 18): an edit's verdict is the edited model's, the loop's verdict is
kept beside it, and the write error at the edit's keys is measured."""
from __future__ import annotations

import dataclasses

import torch

from mobiedit.forward.quant import QuantConfig
from mobiedit.methods.verify import check_written
from mobiedit.methods.mobiedit import MobiEditConfig
from mobiedit.models import load_model
from mobiedit.prompts import prompt_ids, target_ids
from mobiedit.requests import EditRequest
from mobiedit.editing.config import ContextConfig, ROMEConfig
from mobiedit.session import apply_outcome, prepare, run_method
from mobiedit.zo import ZOConfig

REQ = EditRequest(case_id="v1", prompt="{} professionally plays the sport", subject="David Robinson",
                  target_new="baseball", target_true="basketball")
CTX = ContextConfig(lengths=((4, 2),))


def _greedy_says_target(lm, req) -> bool:
    ids = prompt_ids(lm.tokenizer, req.rewrite_prompt)
    tgt = target_ids(lm.tokenizer, req.target_new)
    seq = torch.tensor([ids])
    with torch.no_grad():
        for t in tgt:
            nxt = int(lm.model(input_ids=seq).logits[0, -1].argmax())
            if nxt != t:
                return False
            seq = torch.cat([seq, torch.tensor([[nxt]])], 1)
    return True


def test_rome_verdict_is_the_edited_models(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    cfg = ROMEConfig(layer=0, steps=30, mom2_adjustment=False, context=CTX)
    ctx = prepare(lm, cfg, seed=0)
    out = run_method(lm, REQ, cfg, ctx)
    assert isinstance(out.loop_succeeded, bool) and set(out.write) >= {"holds", "write_error_plain"}
    assert out.write["write_error_plain"] < 1e-4  # the update is solved at the plain prompt's key
    assert out.write["write_error_templates_max"] >= out.write["write_error_templates_mean"] >= 0
    before = lm.model.state_dict()["model.layers.0.mlp.down_proj.weight"].clone()
    apply_outcome(lm, out)
    if out.succeeded:  # the plain prompt (row 0) must show the whole target on the served model
        assert _greedy_says_target(lm, REQ)
    lm.model.state_dict()["model.layers.0.mlp.down_proj.weight"].copy_(before)
    # a write that changes nothing: the edited model's verdict is False, the error 1 at every key
    nothing = dataclasses.replace(out, u=out.u * 0, w=out.w * 0)
    chk = check_written(lm, REQ, nothing, ctx, cfg.objective, cfg.success_fraction, None)
    assert not chk.holds and abs(chk.write_error_plain - 1) < 1e-6 and abs(chk.write_error_templates_mean - 1) < 1e-6
    assert torch.equal(lm.model.state_dict()["model.layers.0.mlp.down_proj.weight"], before)  # restored


def test_mobiedit_reports_both_verdicts_and_can_skip_the_check(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    z = ZOConfig(estimator="fzoo", n_dirs=8, h=0.05, optimizer="adam", lr=0.5, max_steps=40, max_evals=10_000)
    cfg = MobiEditConfig(layer=0, zo=z, quant=QuantConfig("w8a16"), mom2_adjustment=False, context=CTX,
                         stop_on="loop")  # the check after the search (the shipped "written" asks it within)
    ctx = prepare(lm, cfg, seed=0)
    out = run_method(lm, REQ, cfg, ctx)
    assert out.succeeded == out.write["holds"] and isinstance(out.loop_succeeded, bool)
    assert out.summary()["loop_succeeded"] == out.loop_succeeded
    raw = run_method(lm, REQ, dataclasses.replace(cfg, verify_write=False), ctx)
    assert raw.loop_succeeded is None and raw.write == {} and raw.succeeded == out.loop_succeeded
    assert raw.loss_evals == out.loss_evals


def test_the_written_check_reads_what_a_full_forward_of_the_edited_model_reads(tiny_llama_dir):
    """check_written splits the edited model's forward at the edit layer (vocabulary-sliced
    read-out); its loss and row counts are those of a full forward of the edited model."""
    from mobiedit.editing.context import build_edit_inputs
    from mobiedit.forward.graph import FullGraph
    from mobiedit.forward.prefix import compute_prefix_state
    from mobiedit.journal import apply_factors

    lm = load_model(tiny_llama_dir)
    cfg = ROMEConfig(layer=0, steps=30, mom2_adjustment=False, context=CTX)
    ctx = prepare(lm, cfg, seed=0)
    out = run_method(lm, REQ, cfg, ctx)
    chk = check_written(lm, REQ, out, ctx, cfg.objective, cfg.success_fraction, None)
    inputs = build_edit_inputs(lm.tokenizer, REQ, ctx.templates, cfg.objective)
    state = compute_prefix_state(lm.model, lm.family, 0, inputs)  # unedited: the KL reference
    weight = lm.model.model.layers[0].mlp.down_proj.weight
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.copy_(apply_factors(weight, out.u, out.w, lm.family.weight_out_in))
    loss, correct = FullGraph(lm.model, lm.family, 0, inputs, state, cfg.objective)(torch.zeros(1, saved.shape[0]))
    with torch.no_grad():
        weight.copy_(saved)
    assert abs(chk.loss - float(loss[0])) < 1e-4 * max(1.0, abs(float(loss[0])))
    full = (correct[0] == inputs.target_len).float().mean()
    assert abs(chk.rows_correct - float(full)) < 1e-6


def test_mobiedit_stop_on_written_searches_past_a_write_that_fails(tiny_llama_dir, monkeypatch):
    """``stop_on: written`` (issue 18): the eager search stops only where the edited float model
    says the fact. The loop's rule is made to pass everywhere and the first written check to fail:
    the search goes on, counts its checks, and its verdict is the edited model's."""
    import pytest

    import mobiedit.driver as driver
    import mobiedit.methods.mobiedit as me
    from mobiedit.errors import ConfigError

    with pytest.raises(ConfigError, match="stop_on"):
        MobiEditConfig(stop_on="sometimes")
    with pytest.raises(ConfigError, match="verify_write"):
        MobiEditConfig(stop_on="written", verify_write=False)
    lm = load_model(tiny_llama_dir)
    z = ZOConfig(estimator="fzoo", n_dirs=8, h=0.05, optimizer="adam", lr=0.5, max_steps=10, max_evals=10_000)
    cfg = MobiEditConfig(layer=0, zo=z, quant=QuantConfig("w8a16"), mom2_adjustment=False, context=CTX,
                         stop_on="written")
    ctx = prepare(lm, cfg, seed=0)
    assert MobiEditConfig().stop_on == "written"  # the shipped rule (recipes.FZOO.success.stop_on)
    real, calls, built = me.WrittenJudge.__call__, [], []
    real_build = me.written_judge

    def first_fails(self, *args):
        calls.append(1)
        chk = real(self, *args)
        return dataclasses.replace(chk, holds=len(calls) > 1)  # the first write fails, the next holds

    def counted_build(*args):
        built.append(1)
        return real_build(*args)

    monkeypatch.setattr(me.WrittenJudge, "__call__", first_fails)
    monkeypatch.setattr(me, "written_judge", counted_build)
    monkeypatch.setattr(driver, "edit_holds", lambda full, fraction: True)
    monkeypatch.setattr(driver, "within_margin", lambda *args: True)
    out = run_method(lm, REQ, cfg, ctx)
    assert out.config == {"stop_on": "written", "written_checks": 2, "written_refused": 1,
                          **me.search_provenance(cfg)}
    from mobiedit.session import journal_config

    rec = journal_config(out)  # a journal entry records the search that made it, as a bundle edit's does
    assert rec["zo"] == z.as_dict() and rec["quant"] == "w8a16" and rec["success_nll"] == cfg.success_nll
    assert out.loop_succeeded and out.succeeded and out.write["holds"] and out.status == "SUCCESS_CHECK"
    # the delta-independent part measured once per search; the found delta's verdict is the session's
    # (not asked again: two judge calls in all) and its figures are the edited model's
    assert len(built) == 1 and len(calls) == 2
    again = real(real_build(lm, REQ, cfg.layer, ctx, cfg.objective), out.u, out.w, cfg.success_fraction, None)
    assert out.write == {**again.as_dict(), "holds": True}
    n = len(calls)
    loop = run_method(lm, REQ, dataclasses.replace(cfg, stop_on="loop"), ctx)  # the loop's rule: first check stops
    assert "written_checks" not in loop.config and loop.loop_succeeded and len(calls) == n + 1  # the verify after


def test_mobiedit_scores_each_checked_delta_once(tiny_llama_dir):
    """``reuse_checked`` (default on): the base row of a step is the delta the last check scored, so its
    loss is the check's — the edit is the same, its evaluations one a step fewer."""
    lm = load_model(tiny_llama_dir)
    z = ZOConfig(estimator="fzoo", n_dirs=8, h=0.05, optimizer="adam", lr=0.1, max_steps=30, max_evals=10_000)
    cfg = MobiEditConfig(layer=0, zo=z, quant=QuantConfig("w8a16"), mom2_adjustment=False, context=CTX,
                         stop_on="loop", success_nll=0.05)
    ctx = prepare(lm, cfg, seed=0)
    once = run_method(lm, REQ, cfg, ctx)
    twice = run_method(lm, REQ, dataclasses.replace(cfg, reuse_checked=False), ctx)
    steps = len(once.losses)
    assert steps > 2 and len(twice.losses) == steps and once.status == twice.status
    # every step after the first reads its row 0 from the check before it; a search that ran its steps
    # out is judged once more at its last delta, which the loop's last check already scored
    assert twice.loss_evals - once.loss_evals == steps - 1 + (once.status != "SUCCESS_CHECK")
    assert torch.allclose(once.delta, twice.delta, rtol=1e-4, atol=1e-6 * float(twice.delta.norm()))
    assert abs(once.losses[-1] - twice.losses[-1]) < 1e-4 * max(1.0, abs(twice.losses[-1]))
