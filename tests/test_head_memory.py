"""Memory-saving paths must not change the arithmetic: the bf16-stored fp32-computed LM head,
early-stopped key forwards, KL logits at the read-outs only, and K-chunked prefix graphs."""
from __future__ import annotations

import json

import pytest
import torch

from mobiedit.head import ChunkedHead, narrow_head
from mobiedit.forward.quant import QuantConfig, quantized_copy
from mobiedit.quant_io import SIDECAR
from mobiedit.forward.quant_save import save_quantized
from mobiedit.methods.mobiedit import MobiEditConfig
from mobiedit.models import load_model
from mobiedit.requests import EditRequest
from mobiedit.editing.config import ContextConfig
from mobiedit.zo import ZOConfig

REQ = EditRequest(case_id="h1", prompt="{} professionally plays the sport", subject="David Robinson",
                  target_new="baseball", target_true="basketball")


def _cfg() -> MobiEditConfig:
    z = ZOConfig(estimator="fzoo", n_dirs=8, h=0.05, optimizer="adam", lr=0.5, max_steps=4, max_evals=10_000)
    return MobiEditConfig(layer=0, zo=z, quant=QuantConfig("w8a16"), mom2_adjustment=False,
                          context=ContextConfig(lengths=((4, 2),)))


def test_chunked_head_matches_an_fp32_linear_on_the_upcast_weight():
    g = torch.Generator().manual_seed(0)
    w = torch.randn(1000, 24, generator=g).to(torch.bfloat16)
    h = torch.randn(3, 5, 24, generator=g)
    head = ChunkedHead(torch.nn.Parameter(w, requires_grad=False), rows=96)  # 11 slices, a ragged last one
    out = head(h)
    assert out.dtype == torch.float32 and out.shape == (3, 5, 1000)
    torch.testing.assert_close(out, torch.nn.functional.linear(h, w.float()), rtol=1e-6, atol=1e-6)


def test_lower_head_keeps_a_tied_pair_tied_and_activations_fp32(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    m = quantized_copy(lm.model, lm.family, 0, QuantConfig("none", head_dtype="bfloat16"))
    assert m is not lm.model and type(lm.model.lm_head) is torch.nn.Linear  # the original is untouched
    emb = m.model.embed_tokens
    assert isinstance(m.lm_head, ChunkedHead) and emb.weight.dtype == torch.bfloat16
    assert (m.lm_head.weight is emb.weight) == (lm.model.lm_head.weight is lm.model.model.embed_tokens.weight)
    ids = torch.tensor([[3, 5, 7, 9]])
    with torch.no_grad():
        assert emb(ids).dtype == torch.float32
        ref = lm.model(input_ids=ids).logits
        got = m(input_ids=ids).logits
    assert got.dtype == torch.float32
    assert 0 < (got - ref).abs().max() < 0.05 * ref.abs().max()  # rounded weights, not a different model
    assert narrow_head(m, lm.family, torch.bfloat16) is m and len(emb._forward_hooks) == 1  # idempotent


def test_bf16_head_checkpoint_loads_narrow_and_equals_the_in_memory_copy(tiny_llama_dir, tmp_path):
    """`mobiedit quantize --head-dtype bfloat16`: the loader never upcasts the head, restores the
    float islands bit for bit, and computes what quantized_copy(head bf16) computes."""
    q = save_quantized(tiny_llama_dir, tmp_path / "q", 0, QuantConfig("w8a16", head_dtype="bfloat16"))
    assert json.loads((q / SIDECAR).read_text())["head_dtype"] == "bfloat16"
    lmq, lm = load_model(q), load_model(tiny_llama_dir)
    assert isinstance(lmq.model.lm_head, ChunkedHead) and lmq.model.lm_head.weight.dtype == torch.bfloat16
    island, src = lmq.model.model.layers[0].mlp.down_proj.weight, lm.model.model.layers[0].mlp.down_proj.weight
    assert island.dtype == torch.float32 and torch.equal(island, src)
    for (n, p), (_, p0) in zip(lmq.model.model.norm.named_parameters(), lm.model.model.norm.named_parameters()):
        assert p.dtype == torch.float32 and torch.equal(p, p0), n
    ref = quantized_copy(lm.model, lm.family, 0, QuantConfig("w8a16", head_dtype="bfloat16"))
    ids = torch.tensor([[3, 5, 7, 9, 11]])
    with torch.no_grad():
        assert torch.equal(lmq.model(input_ids=ids).logits, ref(input_ids=ids).logits)
    from mobiedit.session import prepare, run_method

    cfg = _cfg()
    out = run_method(lmq, REQ, cfg, prepare(lm, cfg, seed=0))
    assert out.backward_calls == 0 and out.loss_evals > 0


def test_a_broken_sidecar_is_a_named_error(tiny_llama_dir, tmp_path):
    from mobiedit.errors import ModelLoadError

    q = save_quantized(tiny_llama_dir, tmp_path / "q", 0, QuantConfig("w8a16", head_dtype="bfloat16"))
    (q / SIDECAR).write_text('{"head_dtype": "float8"}')
    with pytest.raises(ModelLoadError, match=SIDECAR):
        load_model(q)
    (q / SIDECAR).write_text("{not json")
    with pytest.raises(ModelLoadError, match="mobiedit quantize"):
        load_model(q)


def test_stop_after_a_module_runs_nothing_downstream(tiny_llama_dir):
    from mobiedit.hooks import record

    lm = load_model(tiny_llama_dir)
    layers = lm.model.model.layers
    seen = []
    h = layers[-1].register_forward_hook(lambda *a: seen.append(1))
    try:
        with torch.no_grad(), record(layers[0].mlp.down_proj, stop=True) as rec:
            lm.model(input_ids=torch.tensor([[3, 5, 7]]))
        assert rec.input is not None and not seen
        with torch.no_grad(), record(layers[0].mlp.down_proj) as rec:
            lm.model(input_ids=torch.tensor([[3, 5, 7]]))
        assert seen
    finally:
        h.remove()


def test_kl_reference_at_kept_positions_equals_the_full_logits(tiny_llama_dir):
    from mobiedit.editing.config import ObjectiveConfig
    from mobiedit.editing.context import build_edit_inputs
    from mobiedit.editing.objective import kl_keep, kl_logprobs

    lm = load_model(tiny_llama_dir)
    inputs = build_edit_inputs(lm.tokenizer, REQ, ["{}", "A b. {}", "Some longer context here. {}"], ObjectiveConfig())
    b = inputs.batch
    with torch.no_grad():
        full = lm.model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
        kept = lm.model(input_ids=b.input_ids, attention_mask=b.attention_mask, logits_to_keep=kl_keep(inputs)).logits
    torch.testing.assert_close(kl_logprobs(kept, inputs, kept=True), kl_logprobs(full, inputs), rtol=1e-5, atol=1e-5)


def test_k_chunked_prefix_graph_equals_one_pass(tiny_llama_dir):
    from mobiedit.forward.graph import PrefixGraph
    from mobiedit.forward.prefix import compute_prefix_state
    from mobiedit.editing.config import ObjectiveConfig
    from mobiedit.editing.context import build_edit_inputs

    lm = load_model(tiny_llama_dir)
    obj = ObjectiveConfig()
    inputs = build_edit_inputs(lm.tokenizer, REQ, ["{}", "A b. {}"], obj)
    st = compute_prefix_state(lm.model, lm.family, 0, inputs)
    one = PrefixGraph(lm.model, lm.family, st, obj)
    B, S, _ = st.shape
    small = PrefixGraph(lm.model, lm.family, st, obj, max_act_elems=3 * B * S * 1)
    assert one.k_chunk >= 7 and small.k_chunk < 7
    d = torch.randn(7, st.h_suffix.shape[-1], generator=torch.Generator().manual_seed(1))
    (l1, c1), (l2, c2) = one(d), small(d)
    torch.testing.assert_close(l1, l2, rtol=1e-5, atol=1e-6)
    assert torch.equal(c1, c2)
