"""Prefix-activation reuse is exact: PrefixGraph losses equal the full forward within 1e-5 (fp32)."""
from __future__ import annotations

import math

import pytest
import torch

from mobiedit.forward.graph import FullGraph, PrefixGraph
from mobiedit.forward.prefix import compute_prefix_state
from mobiedit.forward.quant import QuantConfig, centered_correlation, quantized_copy
from mobiedit.models import load_model
from mobiedit.requests import EditRequest
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs

TEMPLATES = ["{}", "The man said that. {}", "Because of the rain in the city, {}"]


def _request() -> EditRequest:
    return EditRequest(case_id="t", prompt="{} professionally plays the sport", subject="David Robinson",
                       target_new="baseball game", target_true="basketball")


def test_prefix_graph_equals_full_forward(tiny_model_dir):
    lm = load_model(tiny_model_dir)
    cfg = ObjectiveConfig()
    inputs = build_edit_inputs(lm.tokenizer, _request(), TEMPLATES, cfg)
    for layer in (0, 1):
        st = compute_prefix_state(lm.model, lm.family, layer, inputs)
        g = torch.Generator().manual_seed(1)
        d = st.h_suffix.shape[-1]
        deltas = torch.randn(4, d, generator=g) * st.v_init.norm() * torch.tensor([0.0, 0.1, 1.0, 3.0]).view(4, 1)
        lp, cp = PrefixGraph(lm.model, lm.family, st, cfg)(deltas)
        lf, cf = FullGraph(lm.model, lm.family, layer, inputs, st, cfg)(deltas)
        assert lp.shape == (4,) and cp.shape == (4, len(TEMPLATES))
        # two fp32 paths (cached prefix vs full sequence) agree to rounding: losses reach ~190 at
        # delta = 3 |v|, where one fp32 ulp is 1.5e-5, so the bound is relative beyond atol
        assert torch.allclose(lp, lf, atol=1e-5, rtol=1e-6), (lp - lf).abs().max()
        assert torch.equal(cp, cf)
        # the delta matters: different deltas give different losses
        assert (lp.max() - lp.min()) > 1e-4


def test_prefix_state_shapes(tiny_model_dir):
    lm = load_model(tiny_model_dir)
    inputs = build_edit_inputs(lm.tokenizer, _request(), TEMPLATES, ObjectiveConfig())
    st = compute_prefix_state(lm.model, lm.family, 0, inputs)
    B, S, P = st.shape
    assert B == len(TEMPLATES) + 1
    assert st.mask.shape == (B, 1, S, P + S)
    assert len(st.prefix_k) == lm.model.config.num_hidden_layers - 1 if hasattr(lm.model.config, "num_hidden_layers") else True
    assert st.mask.any(-1).all()  # no query row without a visible key


def test_lm_head_chunking_is_exact(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    cfg = ObjectiveConfig()
    inputs = build_edit_inputs(lm.tokenizer, _request(), TEMPLATES, cfg)
    st = compute_prefix_state(lm.model, lm.family, 1, inputs)
    deltas = torch.randn(5, st.h_suffix.shape[-1], generator=torch.Generator().manual_seed(3))
    a = PrefixGraph(lm.model, lm.family, st, cfg)(deltas)
    b = PrefixGraph(lm.model, lm.family, st, cfg, max_logit_elems=7)(deltas)  # 1-row vocabulary slices
    assert torch.allclose(a[0], b[0], atol=1e-6) and torch.equal(a[1], b[1])


def test_quantized_graph_keeps_the_perturbation_signal(tiny_llama_dir):
    """W8A16 keeps the centered correlation of losses across perturbations with the float graph."""
    import math

    from mobiedit.forward.quant import QuantConfig, centered_correlation, quantized_copy

    lm = load_model(tiny_llama_dir)
    cfg = ObjectiveConfig()
    inputs = build_edit_inputs(lm.tokenizer, _request(), TEMPLATES, cfg)
    st = compute_prefix_state(lm.model, lm.family, 0, inputs)
    d = st.h_suffix.shape[-1]
    g = torch.Generator().manual_seed(0)
    D = (torch.randint(0, 2, (32, d), generator=g).float() * 2 - 1) * 0.5 * float(st.v_init.norm()) / math.sqrt(d)
    ref = PrefixGraph(lm.model, lm.family, st, cfg)(D)[0]
    q = quantized_copy(lm.model, lm.family, 0, QuantConfig("w8a16"))
    assert q is not lm.model and type(lm.model.model.layers[1].self_attn.q_proj.weight) is torch.nn.Parameter
    stq = compute_prefix_state(q, lm.family, 0, inputs)
    got = PrefixGraph(q, lm.family, stq, cfg)(D)[0]
    assert centered_correlation(got, ref) > 0.99
    assert not torch.equal(got, ref)  # it really is quantized


def test_bf16_forward_keeps_the_signal_and_the_float_islands(tiny_llama_dir):
    """The bf16 scheme: every other linear stored bf16 (matmuls on bf16 operands), the edit layer's
    MLP output and the head float, activations between modules fp32; losses track the float graph."""
    lm = load_model(tiny_llama_dir)
    cfg = ObjectiveConfig()
    inputs = build_edit_inputs(lm.tokenizer, _request(), TEMPLATES, cfg)
    q = quantized_copy(lm.model, lm.family, 0, QuantConfig("bf16"))
    fam = lm.family
    assert q.model.layers[1].self_attn.q_proj.weight.dtype == torch.bfloat16
    assert q.model.layers[0].mlp.down_proj.weight.dtype == torch.float32  # the edited module: a float island
    assert lm.model.model.layers[1].self_attn.q_proj.weight.dtype == torch.float32  # the original is untouched
    st = compute_prefix_state(lm.model, fam, 0, inputs)
    stq = compute_prefix_state(q, fam, 0, inputs)
    assert stq.h_suffix.dtype == torch.float32
    d = st.h_suffix.shape[-1]
    g = torch.Generator().manual_seed(0)
    D = (torch.randint(0, 2, (32, d), generator=g).float() * 2 - 1) * 0.5 * float(st.v_init.norm()) / math.sqrt(d)
    ref = PrefixGraph(lm.model, fam, st, cfg)(D)[0]
    got = PrefixGraph(q, fam, stq, cfg)(D)[0]
    assert got.dtype == torch.float32 and torch.isfinite(got).all()
    # bf16 rounds each matmul's input to 8 mantissa bits: noisier than w8a16 (which keeps fp32
    # activations), still most of the signal — 0.98 here, 0.987 on the fact LM at h = 0.05
    # (`mobiedit bench-quant --schemes w8a16,w8a8,bf16`, docs/results.md)
    assert centered_correlation(got, ref) > 0.95
    assert not torch.equal(got, ref)  # the matmuls really ran in bf16


def test_bf16_is_a_loop_scheme_not_a_checkpoint(tiny_llama_dir, tmp_path):
    from mobiedit.errors import ConfigError
    from mobiedit.forward.quant_save import save_quantized

    with pytest.raises(ConfigError, match="loop-only"):
        save_quantized(tiny_llama_dir, tmp_path / "q", 0, QuantConfig("bf16"))
    assert not (tmp_path / "q").exists()


@pytest.mark.parametrize("sizes", ["0.05,x", "0", "0.05,-1", "nan", ""])
def test_bench_quant_names_a_bad_size_before_building_a_model(sizes, tmp_path, capsys):
    from mobiedit.cli import main

    # a folder that is not a model: the size is checked first, so nothing is loaded or built
    assert main(["bench-quant", "--model", str(tmp_path), "--h", sizes]) == 2
    err = capsys.readouterr().err
    assert "--h" in err and "e.g. --h 0.05,0.5" in err
