"""The search's forward model (``quantized_copy``) is built without a float duplicate of the
matrices it quantizes: it computes exactly what a quantized full deep copy computes, leaves the
float model bit-identical, and shares no storage with it. The RSS saving itself is a benchmark
(`python tools/forward_copy_rss.py`, docs/results.md)."""
from __future__ import annotations

import copy

import pytest
import torch

from mobiedit.forward.quant import QuantConfig, quantize_inplace, quantized_copy, replaced_weights
from mobiedit.head import head_dtype_of, narrow_head
from mobiedit.models import load_model
from mobiedit.rss import _leaves


def _storages(model: torch.nn.Module) -> set[int]:
    return {t.untyped_storage().data_ptr() for p in model.parameters() for t in _leaves(p)}


@pytest.mark.parametrize("scheme,head", [("w8a16", "float32"), ("w8a8", "float32"), ("bf16", "float32"),
                                         ("w8a16", "bfloat16"), ("none", "bfloat16")])
def test_the_copy_computes_what_a_full_deep_copy_computes_and_leaves_the_float_model_alone(tiny_llama_dir, scheme, head):
    lm = load_model(tiny_llama_dir)
    cfg = QuantConfig(scheme, head_dtype=head)
    before = {k: v.clone() for k, v in lm.model.state_dict().items()}
    grads = {n: p.requires_grad for n, p in lm.model.named_parameters()}
    ref = narrow_head(quantize_inplace(copy.deepcopy(lm.model), lm.family, 0, cfg), lm.family,
                      head_dtype_of(head, "quant.head_dtype"))  # the old way: a float duplicate first
    q = quantized_copy(lm.model, lm.family, 0, cfg)
    ids = torch.randint(0, lm.model.config.vocab_size, (2, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        assert torch.equal(q(ids).logits, ref(ids).logits)
    after = lm.model.state_dict()
    assert all(torch.equal(before[k], after[k]) and before[k].dtype == after[k].dtype for k in before)
    assert {n: p.requires_grad for n, p in lm.model.named_parameters()} == grads
    shared = _storages(q) & _storages(lm.model)
    head_storage = {lm.model.lm_head.weight.untyped_storage().data_ptr(),
                    lm.model.model.embed_tokens.weight.untyped_storage().data_ptr()}
    # a float head and embedding (no edit writes them) stay the model's; every other tensor is the copy's own
    assert shared == (head_storage if head == "float32" else set())
    assert q.model.layers[0].mlp.down_proj.weight is not lm.model.model.layers[0].mlp.down_proj.weight  # the island
    assert replaced_weights(lm.model, lm.family, 0, cfg)  # there was something to replace


def test_the_float_islands_are_not_replaced(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    fam = lm.family
    got = {id(w) for w in replaced_weights(lm.model, fam, 1, QuantConfig("w8a16"))}
    assert id(lm.model.model.layers[1].mlp.down_proj.weight) not in got  # the edited matrix stays float
    assert id(lm.model.lm_head.weight) not in got
    assert id(lm.model.model.layers[0].mlp.down_proj.weight) in got
    assert not replaced_weights(lm.model, fam, 1, QuantConfig("none"))
