"""``rome-lean`` (``ROMEConfig.prefix_reuse``): ROME's Adam value search by backprop through the
forward-only method's prefix graph. Same objective, same trajectory as full-model ROME — only
cheaper: no layers ≤ l, no positions before the subject, no weight gradients."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from mobiedit.models import load_model
from mobiedit.requests import bundled_path, load_requests
from mobiedit.editing.compute_v import compute_v
from mobiedit.editing.config import ObjectiveConfig, ROMEConfig
from mobiedit.editing.context import build_edit_inputs, generate_context_templates


@pytest.mark.parametrize("layer", [0, 1])
def test_lean_search_follows_romes_trajectory(tiny_model_dir, layer):
    lm = load_model(tiny_model_dir)
    req = load_requests(bundled_path("counterfact-edit-1k.json"))[3]
    cfg = ROMEConfig(layer=layer, steps=6, early_loss=0.0,
                     objective=ObjectiveConfig(clamp_norm_factor=100.0, weight_decay=1e-2))
    tpl = generate_context_templates(lm.model, lm.tokenizer, cfg.context, torch.Generator().manual_seed(0))[:5]
    inputs = build_edit_inputs(lm.tokenizer, req, tpl, cfg.objective)
    full = compute_v(lm.model, lm.family, inputs, cfg)
    lean = compute_v(lm.model, lm.family, inputs, dataclasses.replace(cfg, prefix_reuse=True))
    assert float(full.delta.norm()) > 0 and len(set(full.losses)) > 3  # it moved: a trajectory worth comparing
    assert lean.losses == pytest.approx(full.losses, rel=1e-4, abs=1e-6)
    assert torch.allclose(lean.v_init, full.v_init, atol=1e-5)
    assert torch.allclose(lean.delta, full.delta, rtol=1e-3, atol=1e-4 * float(full.delta.norm()))
    assert lean.holds == full.holds and lean.steps == full.steps
    # no weight gradients were produced by either search
    assert all(p.grad is None for p in lm.model.parameters())


def test_bench_row_rome_lean_is_rome_with_prefix_reuse():
    from mobiedit.bench import row_config

    lean, plain = row_config("rome-lean", 3, 0), row_config("rome", 3, 0)
    assert lean.prefix_reuse and not plain.prefix_reuse
    assert dataclasses.replace(lean, prefix_reuse=False) == plain
