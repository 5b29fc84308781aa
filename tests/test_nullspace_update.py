"""The sequential update rules — null-space (AlphaEdit) and ``protect`` (C plus the earlier edits'
keys): the projector, the solves, exactness at the edit's key, protection of earlier edits' keys,
and their use in a sequential session with bit-exact undo."""
from __future__ import annotations

import pytest
import torch

from mobiedit.errors import ConfigError, NumericalError
from mobiedit.editing.config import UpdateConfig
from mobiedit.editing.update import (null_space_direction, null_space_projector, protected_moment, rank_one_factors,
                                     solve_c)


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


def test_protect_spares_earlier_keys_and_is_rome_without_them():
    basis, c = _stats()
    g = torch.Generator().manual_seed(2)
    k_old = [torch.randn(16, generator=g) for _ in range(3)]
    k_new = k_old[0] + 0.3 * torch.randn(16, generator=g)
    assert protected_moment(c, [], 1.0) is c  # no earlier edit: ROME's C itself
    rome = solve_c(c, k_new, 1e-6)
    prot = solve_c(protected_moment(c, k_old, 1.0), k_new, 1e-6)
    moved = lambda w: max(abs(float(w @ k)) for k in k_old) / abs(float(w @ k_new))  # noqa: E731
    assert moved(prot) < 0.1 * moved(rome)  # the earlier keys get a tenth of ROME's share or less
    heavier = solve_c(protected_moment(c, k_old, 100.0), k_new, 1e-6)
    assert moved(heavier) < moved(prot)
    # float64 sum of C and the keys' outer products
    m = protected_moment(c, k_old, 0.5)
    assert torch.allclose(m, c.double() + 0.5 * sum(torch.outer(k.double(), k.double()) for k in k_old))
    assert torch.allclose(protected_moment(None, k_old[:1], 1.0), torch.eye(16, dtype=torch.float64)
                          + torch.outer(k_old[0].double(), k_old[0].double()))


def test_update_config_names_the_field():
    for bad, field in (({"rule": "memit"}, "update.rule"), ({"nullspace_threshold": 0.0}, "update.nullspace_threshold"),
                       ({"alpha": 0.0}, "update.alpha"), ({"edited_weight": -1.0}, "update.edited_weight")):
        with pytest.raises(ConfigError) as e:
            UpdateConfig(**bad)
        assert field in str(e.value)


@pytest.mark.parametrize("rule", ["nullspace", "protect"])
def test_sequential_session_solves_against_earlier_keys_and_undo_is_bit_exact(tiny_llama_dir, cache_dir, tmp_path, rule):
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
    cfg = ROMEConfig(layer=0, steps=8, context=ContextConfig(lengths=((4, 2),)), update=UpdateConfig(rule=rule))
    ctx = prepare(lm, cfg, seed=0)
    if rule == "nullspace":
        assert 0 < float(torch.trace(ctx.projector[0])) < ctx.projector[0].shape[0]
    else:
        assert not ctx.projector
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


def test_key_spectrum_report_counts_the_free_dimensions():
    from tools.key_spectrum import spectrum_report

    basis, c = _stats()
    keys = torch.stack([basis[:, 8] + basis[:, 0], basis[:, 9] * 2.0])  # half in the unused space
    rep = spectrum_report(c, keys, [1e-2], ridge=0.0)
    assert rep["d"] == 16 and abs(rep["top5"][0] - 10.0) < 1e-4 and abs(rep["min"] / 1e-4 - 1) < 0.02
    (row,) = rep["projector"]
    assert row["dims"] == 8 and abs(row["key_share_min"] - 2 ** -0.5) < 1e-5 and abs(row["key_share_mean"] - (1 + 2 ** -0.5) / 2) < 1e-5
    # kᵀC⁻¹k: 1/10 + 1/1e-4 for the first key, 4/1e-4 for the second (torch's median: the lower one)
    assert abs(rep["mahalanobis_median"] / (1e4 + 0.1) - 1) < 0.02  # (C in float32)


def test_clamp_ladder_tries_the_smallest_change_first_and_counts_every_try(small_fact_lm):
    import dataclasses

    from mobiedit.models import load_model
    from mobiedit.requests import bundled_path, load_requests
    from mobiedit.editing.config import ObjectiveConfig, ROMEConfig
    from mobiedit.session import prepare, run_method, run_once

    lm = load_model(small_fact_lm)
    req = load_requests(bundled_path("counterfact-edit-1k.json"))[0]
    base = ROMEConfig(layer=1)
    ctx = prepare(lm, base, seed=0)
    w0 = lm.model.model.layers[1].mlp.down_proj.weight.detach().clone()
    tiny = 1e-3  # a value change this small cannot make the model say anything new
    at = lambda c: dataclasses.replace(base, objective=ObjectiveConfig(clamp_norm_factor=c))  # noqa: E731
    first, last = run_once(lm, req, at(tiny), ctx), run_once(lm, req, at(4.0), ctx)
    assert not first.succeeded and last.succeeded
    out = run_method(lm, req, dataclasses.replace(base, update=UpdateConfig(clamp_ladder=(tiny, 4.0))), ctx)  # cold
    assert out.succeeded and out.config["clamp_norm_factor"] == 4.0  # the first rung failed, the second held
    assert out.config["ladder_tries"] == 2 and not out.config["ladder_warm"]
    assert torch.allclose(out.u, last.u) and torch.allclose(out.w, last.w)
    assert out.loss_evals == first.loss_evals + last.loss_evals
    assert out.backward_calls == first.backward_calls + last.backward_calls
    assert len(out.losses) == len(first.losses) + len(last.losses)
    # warm (update.ladder_warm_start): the second rung starts from the first rung's delta, not from zero
    warm_cfg = UpdateConfig(clamp_ladder=(tiny, 4.0), ladder_warm_start=True)
    warm = run_method(lm, req, dataclasses.replace(base, update=warm_cfg), ctx)
    resumed = run_once(lm, req, at(4.0), ctx, start=first.delta)
    assert warm.config["ladder_warm"] and first.delta is not None and float(first.delta.norm()) > 0
    assert torch.equal(warm.u, resumed.u) and warm.loss_evals == first.loss_evals + resumed.loss_evals
    again = run_once(lm, req, at(4.0), ctx, start=last.delta)  # the start is used: the first loss is
    assert abs(again.losses[0] - last.losses[-1]) < 1e-4 * last.losses[0] < last.losses[0] - again.losses[0]  # the end's
    assert torch.equal(lm.model.model.layers[1].mlp.down_proj.weight, w0)  # nothing written
    easy = run_method(lm, req, dataclasses.replace(base, update=UpdateConfig(clamp_ladder=(4.0, 8.0))), ctx)
    assert easy.config["clamp_norm_factor"] == 4.0 and easy.loss_evals == last.loss_evals  # stops at a hold
    with pytest.raises(ConfigError, match="update.clamp_ladder"):
        UpdateConfig(clamp_ladder=(3.0, 2.0))
    with pytest.raises(ConfigError, match="update.clamp_ladder"):
        UpdateConfig(clamp_ladder=(0.0,))


def test_a_rung_starts_warm_only_after_a_search_that_did_not_pass():
    from mobiedit.ladder import climb, warm_start

    d = torch.ones(3)
    assert warm_start(d, False) is d and warm_start(d, None) is d  # None: no write check
    assert warm_start(d, True) is None  # the search passed, the write did not: cold
    assert warm_start(None, False) is None
    tried = []

    def attempt(factor, start):  # holds from factor 2 on; returns its "delta"
        tried.append((factor, start))
        return (factor >= 2.0, torch.full((3,), factor))

    rungs = climb((1.0, 2.0, 3.0), attempt, lambda r: r[0], lambda r: warm_start(r[1], False))
    assert [r.factor for r in rungs] == [1.0, 2.0] and [r.warm for r in rungs] == [False, True]
    assert tried[0][1] is None and torch.equal(tried[1][1], torch.full((3,), 1.0))
    assert len(climb((1.0, 2.0, 3.0), attempt, lambda r: False, lambda r: None)) == 3  # every rung fails
    with pytest.raises(ValueError):
        climb((), attempt, lambda r: True, lambda r: None)


def test_sequential_sessions_get_the_clamp_ladder_by_default():
    from mobiedit.editing.config import ObjectiveConfig, ROMEConfig
    from mobiedit.methods.mobiedit import MobiEditConfig
    from mobiedit.ladder import SEQUENTIAL_LADDER
    from mobiedit.session import sequential_config

    for cfg in (ROMEConfig(), MobiEditConfig(objective=ObjectiveConfig(clamp_norm_factor=8.0))):
        assert sequential_config(cfg, 1) is cfg  # one edit: as configured
        many = sequential_config(cfg, 2)
        c = cfg.objective.clamp_norm_factor
        assert many.update.clamp_ladder == tuple(f * c for f in SEQUENTIAL_LADDER) and many.update.clamp_ladder[-1] == c
        assert many.objective == cfg.objective and many.update.rule == cfg.update.rule
    own = ROMEConfig(update=UpdateConfig(clamp_ladder=(4.0,)))
    assert sequential_config(own, 50) is own  # a config's own ladder (one rung: the single clamp) stays
