"""Random-init tiny Llama, Qwen2 and GPT-2 checkpoints written with ``save_pretrained`` load
through the same code path and can be edited by backprop ROME (efficacy only: a random model
has no facts, so generalization and locality mean nothing there)."""
from __future__ import annotations

import pytest
import torch

from mobiedit.evaluate import score_request, teacher_forced
from mobiedit.families import get_module
from mobiedit.hooks import record
from mobiedit.models import load_model
from mobiedit.prompts import prompt_ids, subject_last_index
from mobiedit.requests import bundled_path, load_requests
from mobiedit.editing.config import ObjectiveConfig, ROMEConfig
from mobiedit.session import apply_outcome, prepare, run_method


def _save(kind: str, path) -> None:
    """A tiny random checkpoint with a wide init (HF's 0.02 leaves a 3-layer model's logits flat,
    so no delta can move them), written with ``save_pretrained``."""
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    from conftest import _tokenizer

    tok = _tokenizer(path)
    torch.manual_seed(0)  # noqa: HF draws the init from the global generator; test-only
    common = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id, initializer_range=0.2)
    dense = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2)
    model = {"llama": lambda: LlamaForCausalLM(LlamaConfig(**dense, **common)),
             "qwen2": lambda: Qwen2ForCausalLM(Qwen2Config(**dense, **common)),
             "gpt2": lambda: GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=3, n_head=4, n_positions=256, **common))}[kind]()
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)


def _mlp_out_at_subject(lm, req) -> torch.Tensor:
    ids = torch.tensor([prompt_ids(lm.tokenizer, req.rewrite_prompt)])
    with torch.no_grad(), record(get_module(lm.model, lm.family.mlp_out, 1), inputs=False) as rec:
        lm.model(input_ids=ids)
    return rec.output[0, subject_last_index(lm.tokenizer, req.rewrite_prompt, req.subject)].clone()


def _target_nll(lm, req) -> float:
    return teacher_forced(lm.model, lm.tokenizer, [req.rewrite_prompt], [req.target_new]).nll[0]


@pytest.mark.parametrize("kind", ["llama", "qwen2", "gpt2"])
def test_tiny_checkpoint_loads_and_rome_edits_it(kind, tmp_path, cache_dir):
    """The whole ROME path on each family's layout (GPT-2's Conv1D is stored transposed): the value
    search lowers its loss, the applied rank-one update moves the MLP output at the subject's last
    token by exactly ``u`` (the edit lands at the key). Efficacy and the target's NLL are printed,
    not required: a random 3-layer model's readout barely attends to the subject."""
    _save(kind, tmp_path)
    lm = load_model(tmp_path)
    req = load_requests(bundled_path("counterfact-edit-1k.json"))[0]
    cfg = ROMEConfig(layer=1, steps=60, objective=ObjectiveConfig(clamp_norm_factor=100.0, weight_decay=1e-3))
    ctx = prepare(lm, cfg, seed=0)
    out_before, nll_before = _mlp_out_at_subject(lm, req), _target_nll(lm, req)
    res = run_method(lm, req, cfg, ctx)
    assert res.losses[-1] < res.losses[0] - 0.3, res.losses
    apply_outcome(lm, res)
    moved = _mlp_out_at_subject(lm, req) - out_before
    assert torch.allclose(moved, res.u, rtol=1e-3, atol=1e-3 * float(res.u.norm())), (kind, moved[:4], res.u[:4])
    eff = score_request(lm.model, lm.tokenizer, req, None).efficacy_acc
    print(f"{kind}: efficacy {eff:.2f}, target NLL {nll_before:.2f} -> {_target_nll(lm, req):.2f}")


@pytest.mark.parametrize("kind", ["llama", "gpt2"])
def test_an_edit_layer_the_model_lacks_is_a_config_error_and_the_last_layer_warns(kind, tmp_path, caplog):
    """``--layer 7`` on a 3-layer model used to fail deep in the module lookup ("module ... not
    found — check the family row"); :func:`prepare` now names the layer and the range. The last
    layer is allowed but warned on (its output at the subject reaches no later position)."""
    from mobiedit.editing.config import UpdateConfig
    from mobiedit.errors import ConfigError

    _save(kind, tmp_path)
    lm = load_model(tmp_path)
    for bad in (ROMEConfig(layer=7), ROMEConfig(layer=3, update=UpdateConfig(spread=2))):
        with pytest.raises(ConfigError) as e:
            prepare(lm, bad, seed=0)
        assert "0-2" in str(e.value) and e.value.where.startswith("--layer")
    with caplog.at_level("WARNING", logger="mobiedit.families"):
        prepare(lm, ROMEConfig(layer=2), seed=0)
    assert "the model's last" in caplog.text
