"""Qwen2 and GPT-2 (learned positions, Conv1D) bundles: greedy decoding from an ONNX bundle equals
HF greedy decoding (the Llama bundles are covered in test_export_bundle.py); the model profile's
success rule becomes the bundle recipe's."""
from __future__ import annotations

import shutil

import pytest
import torch

from mobiedit.models import load_model
from mobiedit.editing.config import ContextConfig

from mobiedit.export.bundle import export_bundle, load_bundle
from mobiedit.export.config import EditSetup, EditShapes, ExportConfig, InferenceShapes, LowerConfig
from mobiedit.export.ops import bundle_tokens
from mobiedit.profile import ModelProfile, write_profile


@pytest.mark.parametrize("tiny_model_dir", ["qwen2", "gpt2"], indirect=True)
def test_onnx_bundle_decodes_like_hf(tiny_model_dir, tmp_path):
    cfg = ExportConfig(inference=InferenceShapes(max_seq_len=40, prefill_chunk=8, slots=2),
                       edit_shapes=EditShapes(K=3, rows=3, suffix=20, prefix=24, targets=24, kl=1),
                       lower=LowerConfig(runtime="onnxruntime"),
                       edit=EditSetup(layer=1, context=ContextConfig(lengths=((2, 1),)), mom2=False))
    model = tmp_path / "m"
    shutil.copytree(tiny_model_dir, model)
    write_profile(model, ModelProfile(edit_layer=1, success={"nll": 0.2}))  # this model's margin
    path = export_bundle(model, tmp_path / "b", cfg)
    lm = load_model(tiny_model_dir)
    prompt = "The Eiffel Tower is located in"
    ids = lm.tokenizer(prompt)["input_ids"]
    hf = lm.model.generate(torch.tensor([ids]), max_new_tokens=10, do_sample=False)[0, len(ids):].tolist()
    got = bundle_tokens(path, prompt, 10)
    assert got == hf[:len(got)] and len(got) >= 1
    manifest = load_bundle(path).manifest
    assert manifest["model_family"] == lm.family.name
    assert manifest["recipe"]["success"]["nll"] == 0.2 and manifest["recipe"]["success"]["fraction"] == 0.75
