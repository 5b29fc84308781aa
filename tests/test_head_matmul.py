"""``quant.head_matmul: bf16``: the loop's LM-head read-out on bf16 operands for the deltas'
differences from their mean, fp32 for the mean — the rounding scales with the perturbation's change
of the logits, so the losses keep the float graph's signal where a whole-logit bf16 head would not."""
from __future__ import annotations

import math

import pytest
import torch

from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs
from mobiedit.errors import ConfigError
from mobiedit.families import get_module
from mobiedit.forward.graph import PrefixGraph
from mobiedit.forward.prefix import compute_prefix_state
from mobiedit.forward.quant import LOW_WEIGHT, QuantConfig, centered_correlation, low_head, quantized_copy
from mobiedit.models import load_model
from mobiedit.requests import EditRequest

TEMPLATES = ["{}", "The man said that. {}", "Because of the rain in the city, {}"]
REQ = EditRequest(case_id="t", prompt="{} professionally plays the sport", subject="David Robinson",
                  target_new="baseball game", target_true="basketball")


def _graphs(lm, cfg: QuantConfig, layer: int = 0):
    inputs = build_edit_inputs(lm.tokenizer, REQ, TEMPLATES, ObjectiveConfig())
    q = quantized_copy(lm.model, lm.family, layer, cfg)
    ref = PrefixGraph(lm.model, lm.family, compute_prefix_state(lm.model, lm.family, layer, inputs), ObjectiveConfig())
    got = PrefixGraph(q, lm.family, compute_prefix_state(q, lm.family, layer, inputs), ObjectiveConfig())
    return q, ref, got


def _perturbations(ref: PrefixGraph, K: int, h: float, seed: int = 0, around: float = 0.0) -> torch.Tensor:
    st = ref.state
    d = st.h_suffix.shape[-1]
    g = torch.Generator().manual_seed(seed)
    unit = float(st.v_init.norm()) / math.sqrt(d)
    x0 = torch.randn(d, generator=g) * around * unit  # the search's current point
    return x0 + (torch.randint(0, 2, (K, d), generator=g).float() * 2 - 1) * h * unit


def test_the_copy_carries_a_bf16_head_and_the_float_model_is_untouched(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    q, _, got = _graphs(lm, QuantConfig("none", head_matmul="bf16"))
    head, float_head = get_module(q, lm.family.lm_head), get_module(lm.model, lm.family.lm_head)
    assert q is not lm.model and low_head(float_head) is None
    assert low_head(head).dtype == torch.bfloat16 and torch.equal(low_head(head), head.weight.bfloat16())
    assert LOW_WEIGHT not in dict(q.state_dict())  # not persistent: never saved with a model
    assert got.w_low is low_head(head)
    # a head already stored in bf16 is its own low weight: no second copy
    qb = quantized_copy(lm.model, lm.family, 0, QuantConfig("none", head_dtype="bfloat16", head_matmul="bf16"))
    hb = get_module(qb, lm.family.lm_head)
    assert low_head(hb).data_ptr() == hb.weight.data_ptr()
    # the default builds no low weight (and scheme none with the defaults is the model itself)
    assert quantized_copy(lm.model, lm.family, 0, QuantConfig("none")) is lm.model
    assert low_head(get_module(quantized_copy(lm.model, lm.family, 0, QuantConfig("bf16")), lm.family.lm_head)) is None
    with pytest.raises(ConfigError) as e:
        QuantConfig(head_matmul="fp8")
    assert e.value.where == "quant.head_matmul"


@pytest.mark.parametrize("around", [0.0, 20.0])
def test_the_losses_keep_the_float_graphs_signal(tiny_llama_dir, around):
    """Around x0 = 0 and around a far point (the search's x after many steps): the read-out's
    losses track fp32's to within the differences' bf16 rounding — correlation above 0.9999 — while
    a bf16 rounding of the whole logits would not; the edit's verdict counts are the same; and the
    one-delta call (its own mean) is fp32 exactly."""
    lm = load_model(tiny_llama_dir)
    _, ref, got = _graphs(lm, QuantConfig("none", head_matmul="bf16"))
    D = _perturbations(ref, 32, 0.05, around=around)
    (lr, cr), (lg, cg) = ref(D), got(D)
    assert not torch.equal(lr, lg)  # the differences really ran in bf16
    assert centered_correlation(lg, lr) > 0.9999
    assert torch.equal(cr, cg)
    assert torch.equal(got(D[:1])[0], ref(D[:1])[0])
    # the autograd path (rome-lean's) is fp32 throughout on the same forward model
    assert torch.equal(got.differentiable(D[:4])[0], ref(D[:4])[0])
    # what the mean buys: every logit rounded to bf16 (the naive head) keeps less of the signal
    naive = PrefixGraph(lm.model, lm.family, ref.state, ObjectiveConfig())
    naive.w_low = get_module(lm.model, lm.family.lm_head).weight.detach().bfloat16()
    naive_losses = _whole_logits_bf16(naive, D)
    assert centered_correlation(lg, lr) > centered_correlation(naive_losses, lr)


def _whole_logits_bf16(graph: PrefixGraph, D: torch.Tensor) -> torch.Tensor:
    """The losses with every logit computed on bf16 operands (no fp32 mean): the read-out
    ``graph`` would give if the mean were rounded too (the comparison the mean is judged by)."""
    import mobiedit.forward.graph as G

    orig = G._readout

    def rounded(head, h, label, max_elems, w_low=None):
        class _H(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = torch.nn.Parameter(w_low.float(), requires_grad=False)

        # the whole read-out from bf16-rounded inputs and weights, logits rounded to bf16
        lse, target, argmax, kl = orig(_H(), h.bfloat16().float(), label, max_elems)
        return lse.bfloat16().float(), target.bfloat16().float(), argmax, kl

    G._readout = rounded
    try:
        return graph(D)[0]
    finally:
        G._readout = orig


def test_bench_quant_scheme_specs():
    from mobiedit.bench_prefix import quant_spec

    assert quant_spec("bf16") == QuantConfig("bf16")
    assert quant_spec("bf16+head") == QuantConfig("bf16", head_matmul="bf16")
    with pytest.raises(ConfigError) as e:
        quant_spec("bf16+tail")
    assert e.value.where == "--schemes"


def test_a_profile_or_config_turns_it_on_for_the_search_and_the_journal_records_it(tiny_llama_dir):
    """``methods.mobiedit.quant.head_matmul`` (the Gemma profile's) reaches the method config, the
    forward model the loop runs on, and the provenance a journal entry records; the default records nothing."""
    from mobiedit.methods.mobiedit import forward_model, search_provenance
    from mobiedit.resolve import load_method_config

    lm = load_model(tiny_llama_dir)
    cfg = load_method_config("mobiedit", overrides={"layer": 0, "quant": {"head_matmul": "bf16"}})
    assert (cfg.quant.scheme, cfg.quant.head_matmul) == ("w8a16", "bf16")
    fwd = forward_model(lm, cfg)
    assert low_head(get_module(fwd, lm.family.lm_head)) is not None
    assert search_provenance(cfg)["head_matmul"] == "bf16"
    assert "head_matmul" not in search_provenance(load_method_config("mobiedit", overrides={"layer": 0}))
