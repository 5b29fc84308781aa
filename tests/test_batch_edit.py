"""Batch edits (issue 16, mobiedit.batch): one solve meets every request of a batch at its key; the
batch is journaled as rank-one entries that undo bit-exactly; a bad batch size is a named error."""
from __future__ import annotations

import shutil

import pytest
import torch

from mobiedit.editing.update import batch_factors
from mobiedit.errors import ConfigError, NumericalError


def test_batch_solve_meets_every_key_and_reduces_to_rome_for_one_edit():
    g = torch.Generator().manual_seed(0)
    n, d_in, d_out = 4, 16, 8
    k = torch.randn(n, d_in, generator=g)
    w = torch.randn(n, d_in, generator=g)
    w = w / (w * k).sum(1, keepdim=True)  # ROME's normalisation: w_i · k_i = 1
    deltas = torch.randn(n, d_out, generator=g)
    u = batch_factors(k, w, deltas)
    dw = u.double().T @ w.double()  # Σ_j u_j w_jᵀ, [d_out, d_in]
    assert torch.allclose((dw @ k.double().T).T, deltas.double(), atol=1e-4)
    # separate ROME edits would not: each moves the others' keys
    separate = (deltas.double().T @ w.double() @ k.double().T).T
    assert not torch.allclose(separate, deltas.double(), atol=1e-2)
    one = batch_factors(k[:1], w[:1], deltas[:1])
    assert torch.allclose(one, deltas[:1], atol=1e-6)  # one edit: ROME's own u
    with pytest.raises(NumericalError, match="share a key") as e:  # the same subject twice
        batch_factors(torch.cat([k[:1], k[:1]]), torch.cat([w[:1], w[:1]]), deltas[:2])
    assert e.value.where == "batch"


def test_edit_batched_writes_one_solve_as_entries_that_undo_bit_exactly(tiny_llama_dir, tmp_path):
    from mobiedit.batch import edit_batched, plain_keys
    from mobiedit.editing.config import ContextConfig, ROMEConfig
    from mobiedit.journal import Journal
    from mobiedit.models import load_model
    from mobiedit.requests import EditRequest
    from mobiedit.session import prepare, run_method

    folder = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "mobiedit.json").write_text('{"edit_layer": 0, "stats_corpus": "counterfact"}')
    lm = load_model(folder)
    weight = lm.model.model.layers[0].mlp.down_proj.weight
    w0 = weight.detach().clone()
    cfg = ROMEConfig(layer=0, steps=8, context=ContextConfig(lengths=((4, 2),)))
    ctx = prepare(lm, cfg, seed=0)
    reqs = [EditRequest(case_id=f"b{i}", prompt="{} plays the sport", subject=s, target_new=t, target_true="golf")
            for i, (s, t) in enumerate((("Anna Lee", "tennis"), ("Bo Chen", "hockey"), ("Cy Diaz", "rugby"),
                                        ("Di Eng", "chess")))]
    alone = [run_method(lm, r, cfg, ctx) for r in reqs[:3]]  # what each request searches on the unedited model
    j = Journal.open(tmp_path / "j")
    recs = edit_batched(lm, reqs, cfg, ctx, j, batch=3, force=True, progress=False)
    assert [r.applied for r in recs] == [True] * 4
    assert [r.outcome.config["batch"] for r in recs] == [0, 0, 0, 1]
    assert all(r.outcome.loop_succeeded is not None for r in recs)  # the alone verdict, kept beside the batch's
    entries = j.entries()
    assert len(entries) == 4 and [e.config["batch_size"] for e in entries] == [3, 3, 3, 1]
    # the first batch's written change meets each request's own searched change at its plain key
    first = torch.zeros_like(w0, dtype=torch.float64)
    for e in entries[:3]:
        u, w = j.load_factors(e)
        first += torch.outer(u.double(), w.double())
    got = plain_keys(lm, 0, reqs[:3]).double() @ first.T
    want = torch.stack([a.u for a in alone]).double()
    assert torch.allclose(got, want, atol=1e-3 * float(want.abs().max())), (got - want).abs().max()
    for e in j.entries(active_only=True):
        j.undo(e.id, lm.model, lm.family)
    assert torch.equal(weight.detach(), w0)


def test_a_bad_batch_size_is_a_named_error(tiny_llama_dir):
    from mobiedit import api

    with pytest.raises(ConfigError) as e:
        api.edit(tiny_llama_dir, [], "rome", batch=0)
    assert e.value.where == "--batch"
