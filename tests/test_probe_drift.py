"""tools/probe_drift.py: the first N edits of a journal rebuilt from its base weights, a spread
edit's entries (one per layer) counted as one edit."""
from __future__ import annotations

import dataclasses

import torch

from mobiedit.journal import Journal, apply_factors
from mobiedit.requests import requests_from_cli
from tests.journal_kit import LLAMA, factors, tiny_llama
from tools.probe_drift import edited_weights


def test_edited_weights_counts_a_spread_edit_once(tmp_path):
    model, gen = tiny_llama(), torch.Generator().manual_seed(7)
    j = Journal.open(tmp_path / "journal")
    base = {layer: model.model.layers[layer].mlp.down_proj.weight.detach().clone() for layer in (0, 1)}
    made = {}
    for case in ("a", "b"):
        req = requests_from_cli(f"S{case}", "{} likes", "tea", "coffee")[0]
        req = dataclasses.replace(req, case_id=case)
        for layer in (0, 1):  # one edit spread over two layers: two entries, one request
            weight = model.model.layers[layer].mlp.down_proj.weight
            u, w = factors(weight, True, gen)
            j.record(req, "rome", LLAMA, layer, LLAMA.mlp_out.format(layer), u, w, weight.detach().clone())
            with torch.no_grad():
                weight.copy_(apply_factors(weight, u, w, True))
            made[(case, layer)] = (u, w)
    first = [e.request["case_id"] for e in j.entries(active_only=True)][0]
    weights, reqs = edited_weights(Journal.open(tmp_path / "journal", readonly=True), 1)
    assert [r["case_id"] for r in reqs] == [first]
    for layer in (0, 1):
        u, w = made[(first, layer)]
        assert torch.equal(weights[LLAMA.mlp_out.format(layer)], apply_factors(base[layer], u, w, True))
    weights, reqs = edited_weights(Journal.open(tmp_path / "journal", readonly=True), 2)
    assert len(reqs) == 2
    for layer in (0, 1):
        assert torch.equal(weights[LLAMA.mlp_out.format(layer)], model.model.layers[layer].mlp.down_proj.weight)
