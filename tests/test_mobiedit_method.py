"""The forward-only MobiEdit edit: native loop == Python oracle end to end; budget and counters."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from mobiedit.journal import Journal
from mobiedit.methods.mobiedit import MobiEditConfig
from mobiedit.forward.quant import QuantConfig
from mobiedit.models import load_model
from mobiedit.requests import EditRequest
from mobiedit.editing.config import ContextConfig
from mobiedit.session import edit_sequential, prepare
from mobiedit.zo import ZOConfig

REQ = EditRequest(case_id="p1", prompt="{} professionally plays the sport", subject="David Robinson",
                  target_new="baseball", target_true="basketball")


def _cfg(backend: str, **zo) -> MobiEditConfig:
    z = ZOConfig(estimator="fzoo", n_dirs=8, h=0.05, optimizer="adam", lr=0.5, max_steps=6, max_evals=10_000, **zo)
    return MobiEditConfig(layer=0, zo=z, quant=QuantConfig("w8a16"), backend=backend, mom2_adjustment=False,
                          context=ContextConfig(lengths=((4, 2),)))


def test_native_and_python_loops_write_the_same_journal_entry(tiny_llama_dir, tmp_path):
    entries = {}
    for backend in ("native", "python"):
        lm = load_model(tiny_llama_dir)
        cfg = _cfg(backend)
        ctx = prepare(lm, cfg, seed=0)
        j = Journal.open(tmp_path / backend)
        recs = edit_sequential(lm, [REQ], cfg, ctx, j, force=True, progress=False)
        assert recs[0].applied and recs[0].outcome.backward_calls == 0
        e = j.entries()[0]
        entries[backend] = (e, *j.load_factors(e), recs[0].outcome)
    (en, un, wn, on), (ep, up, wp, op) = entries["native"], entries["python"]
    assert on.status == op.status and on.loss_evals == op.loss_evals and on.forward_calls == op.forward_calls
    assert torch.allclose(un, up, atol=1e-5, rtol=1e-5) and torch.allclose(wn, wp, atol=1e-6, rtol=1e-5)
    assert en.request == ep.request and en.module == ep.module and en.layer == ep.layer
    assert on.losses == op.losses or max(abs(a - b) for a, b in zip(on.losses, op.losses)) < 1e-5


def test_loss_evaluations_are_counted_and_budgeted(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    cfg = _cfg("native")
    cfg = dataclasses.replace(cfg, zo=dataclasses.replace(cfg.zo, max_steps=1000, max_evals=60, check_every=2))
    ctx = prepare(lm, cfg, seed=0)
    from mobiedit.session import run_method

    out = run_method(lm, REQ, cfg, ctx)
    K = cfg.zo.K
    steps = out.loss_evals // K
    # K per step plus one per success check, within the budget (+1 final check of a failed edit)
    assert out.loss_evals <= 60 + 1 + steps
    assert out.status in ("BUDGET", "SUCCESS_CHECK")
    assert out.sequences == out.loss_evals * (len(ctx.templates) + 1)


def test_prequantized_checkpoint_edits_like_the_quantized_copy(tiny_llama_dir, tmp_path):
    """`mobiedit quantize` writes int8 weights with the edit layer's MLP output and the LM head float;
    MobiEdit on that folder runs on it as is and finds the same losses as on a quantized copy."""
    from mobiedit.errors import ConfigError
    from mobiedit.forward.quant import is_prequantized
    from mobiedit.forward.quant_save import save_quantized
    from mobiedit.session import run_method

    q = save_quantized(tiny_llama_dir, tmp_path / "q", 0, QuantConfig("w8a16"))
    lmq = load_model(q)
    layers = lmq.model.model.layers
    assert is_prequantized(lmq.model)
    assert type(layers[1].mlp.down_proj.weight).__name__ == "Int8Tensor"
    assert type(layers[0].mlp.down_proj.weight) is torch.nn.Parameter  # the float island
    assert type(lmq.model.lm_head.weight) is torch.nn.Parameter
    cfg = _cfg("native")
    lm = load_model(tiny_llama_dir)
    ctx = prepare(lm, cfg, seed=0)  # the same context templates for both (the quantized model samples others)
    out_q = run_method(lmq, REQ, cfg, ctx)
    out_f = run_method(lm, REQ, cfg, ctx)
    assert out_q.loss_evals == out_f.loss_evals and out_q.backward_calls == 0
    assert max(abs(a - b) for a, b in zip(out_q.losses, out_f.losses)) < 1e-4
    with pytest.raises(ConfigError, match="quantized"):
        run_method(lmq, REQ, dataclasses.replace(cfg, layer=1), prepare(lmq, dataclasses.replace(cfg, layer=1), seed=0))
