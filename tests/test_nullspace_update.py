"""The null-space (AlphaEdit) update rule: the projector, the solve, exactness at the edit's key,
protection of earlier edits' keys, and its use in a sequential session with bit-exact undo."""
from __future__ import annotations

import pytest
import torch

from mobiedit.errors import ConfigError, NumericalError
from mobiedit.editing.config import UpdateConfig
from mobiedit.editing.update import null_space_direction, null_space_projector, rank_one_factors


def _stats(d=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    basis = torch.linalg.qr(torch.randn(d, d, generator=g))[0]
    lam = torch.cat([torch.full((d // 2,), 10.0), torch.full((d - d // 2,), 1e-4)])  # half the space unused
    return basis, (basis * lam) @ basis.T


def test_projector_spans_the_small_eigenvectors():
    basis, c = _stats()
    p = null_space_projector(c, 1e-2)
    assert torch.allclose(p @ p, p, atol=1e-5) and torch.allclose(p, p.T, atol=1e-6)
    assert abs(float(torch.trace(p)) - 8) < 1e-4
    assert float((p @ basis[:, :8]).abs().max()) < 1e-5  # the used directions are projected out


def test_direction_is_exact_at_the_key_and_spares_earlier_keys():
    basis, c = _stats()
    p = null_space_projector(c, 1e-2)
    g = torch.Generator().manual_seed(1)
    k_old = torch.randn(16, generator=g)
    k_new = k_old + 0.3 * torch.randn(16, generator=g)  # a similar subject
    delta = torch.randn(8, generator=g)
    out = torch.zeros(8)
    u, w = rank_one_factors(k_new, out, out + delta, null_space_direction(p, k_new, [k_old], alpha=0.1))
    assert torch.allclose(u * (w @ k_new), delta, atol=1e-4)  # exact at the edit's own key
    u0, w0 = rank_one_factors(k_new, out, out + delta, null_space_direction(p, k_new, [], alpha=0.1))
    assert abs(float(w @ k_old)) < abs(float(w0 @ k_old))  # the earlier key moves less
    for kept in basis[:, :8].T:  # natural text's directions barely move
        assert abs(float(w @ kept)) < 1e-3 * float(w.norm() * kept.norm()) + 1e-6
    with pytest.raises(NumericalError, match="nullspace"):  # a key natural text fully uses: no room
        null_space_direction(p, basis[:, 0] * 3.0, [], alpha=0.1)


def test_update_config_names_the_field():
    for bad, field in (({"rule": "memit"}, "update.rule"), ({"nullspace_threshold": 0.0}, "update.nullspace_threshold"),
                       ({"alpha": 0.0}, "update.alpha")):
        with pytest.raises(ConfigError) as e:
            UpdateConfig(**bad)
        assert field in str(e.value)


def test_sequential_session_solves_against_earlier_keys_and_undo_is_bit_exact(tiny_llama_dir, cache_dir, tmp_path):
    import dataclasses

    from mobiedit.journal import Journal
    from mobiedit.models import load_model
    from mobiedit.requests import EditRequest
    from mobiedit.editing.config import ContextConfig, ROMEConfig
    from mobiedit.session import edit_sequential, prepare, seed_edited_keys

    import shutil

    folder = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "mobiedit.json").write_text('{"edit_layer": 0, "stats_corpus": "counterfact"}')
    lm = load_model(folder)
    w0 = lm.model.model.layers[0].mlp.down_proj.weight.detach().clone()
    cfg = ROMEConfig(layer=0, steps=8, context=ContextConfig(lengths=((4, 2),)), update=UpdateConfig(rule="nullspace"))
    ctx = prepare(lm, cfg, seed=0)
    assert 0 < float(torch.trace(ctx.projector[0])) < ctx.projector[0].shape[0]
    reqs = [EditRequest(case_id=f"s{i}", prompt="{} plays the sport", subject=s, target_new=t, target_true="golf")
            for i, (s, t) in enumerate((("Anna Lee", "tennis"), ("Bo Chen", "hockey"), ("Cy Diaz", "rugby")))]
    j = Journal.open(tmp_path / "j")
    recs = edit_sequential(lm, reqs, cfg, ctx, j, force=True, progress=False)
    assert all(r.applied for r in recs) and len(ctx.edited_keys[0]) == 3
    # a session continuing the folder recomputes the same keys from the journal's requests
    ctx2 = dataclasses.replace(ctx, edited_keys={})
    assert seed_edited_keys(lm, ctx2, j, 0) == 3
    for a, b in zip(ctx.edited_keys[0], ctx2.edited_keys[0]):
        assert torch.allclose(a, b, atol=1e-5)
    first = j.entries()[0].id  # undo of an early edit: the later edits stay as solved
    j.undo(first, lm.model, lm.family)
    assert torch.equal(lm.model.model.layers[0].mlp.down_proj.weight, j.rebuild("model.layers.0.mlp.down_proj"))
    for e in j.entries(active_only=True):
        j.undo(e.id, lm.model, lm.family)
    assert torch.equal(lm.model.model.layers[0].mlp.down_proj.weight, w0)
