"""The ``rows`` update rule (issue 18, item 2: write at the keys that were searched): a direction
that is 1 at every context template's key with the least C-norm, ROME's direction in the limit of a
large ridge, exact writes at every template row in a real edit, and its config field."""
from __future__ import annotations

import pytest
import torch

from mobiedit.errors import ConfigError
from mobiedit.editing.config import UpdateConfig
from mobiedit.editing.update import rank_one_factors, rows_direction, solve_c


def _case(d=24, n=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    c = (a @ a.T / d + 0.05 * torch.eye(d, dtype=torch.float64)).float()
    base = torch.randn(d, generator=g)
    keys = base + 0.4 * torch.randn(n, d, generator=g)  # one subject in n contexts
    return c, keys


def test_rows_direction_is_one_at_every_key_with_the_least_c_norm():
    c, keys = _case()
    w = rows_direction(c, keys, 1e-9, 1e-9)
    assert torch.allclose(keys @ w, torch.ones(keys.shape[0]), atol=1e-4)
    # any other direction that is 1 at the keys has a larger C-norm: move along the keys' null space
    g = torch.Generator().manual_seed(3)
    q = torch.linalg.qr(keys.T.double(), mode="complete")[0][:, keys.shape[0]:]  # ⟂ every key
    other = w.double() + q @ torch.randn(q.shape[1], generator=g, dtype=torch.float64) * 0.1
    assert torch.allclose(keys.double() @ other, torch.ones(keys.shape[0], dtype=torch.float64), atol=1e-4)
    assert float(other @ c.double() @ other) > float(w.double() @ c.double() @ w.double())


def test_rows_direction_tends_to_rome_with_a_large_ridge():
    c, keys = _case(seed=1)
    rome = solve_c(c, keys.mean(0), 1e-6)
    far = rows_direction(c, keys, 1e-6, 1e6)
    cos = float(torch.nn.functional.cosine_similarity(far.double(), rome.double(), dim=0))
    assert cos > 0.999999
    near = rows_direction(c, keys, 1e-6, 1e-6)
    assert float(torch.nn.functional.cosine_similarity(near.double(), rome.double(), dim=0)) < 0.99
    # ROME's w is exact at the plain key only; the rows rule's at every template key
    k_cur, out, delta = keys[0], torch.zeros(5), torch.arange(5.0)
    for d, exact in ((rome, False), (near, True)):
        u, w = rank_one_factors(k_cur, out, out + delta, d)
        err = (keys @ w - 1).abs().max()
        assert (float(err) < 1e-3) is exact


def test_rows_ridge_names_the_field():
    for bad in (0.0, -1.0, float("nan"), float("inf"), "0.1", True):
        with pytest.raises(ConfigError) as e:
            UpdateConfig(rule="rows", rows_ridge=bad)
        assert "update.rows_ridge" in str(e.value)


def test_rows_rule_writes_the_searched_delta_at_every_template_key(tiny_llama_dir):
    """A real ROME edit under ``rule: rows``: the written update delivers the searched δ at every
    context template's key (write error at the templates ~0, and exact at the plain prompt), where
    ROME's rule delivers δ·(wᵀk_i) there; the searched δ is the same (the rule only writes)."""
    from mobiedit.editing.config import ContextConfig, ROMEConfig
    from mobiedit.models import load_model
    from mobiedit.requests import EditRequest
    from mobiedit.session import prepare, run_method

    lm = load_model(tiny_llama_dir)
    req = EditRequest(case_id="r1", prompt="{} professionally plays the sport", subject="David Robinson",
                      target_new="baseball", target_true="basketball")
    outs = {}
    for rule in ("rome", "rows"):
        cfg = ROMEConfig(layer=0, steps=10, mom2_adjustment=False, context=ContextConfig(lengths=((4, 3),)),
                         update=UpdateConfig(rule=rule, rows_ridge=1e-6))
        outs[rule] = run_method(lm, req, cfg, prepare(lm, cfg, seed=0))
    assert torch.equal(outs["rome"].delta, outs["rows"].delta)
    assert outs["rows"].write["write_error_templates_max"] < 1e-2 < outs["rome"].write["write_error_templates_max"]
    assert outs["rows"].write["write_error_plain"] < 1e-3


def test_rows_protect_is_exact_at_the_templates_and_holds_the_applied_keys_still():
    """``rows-protect``: still 1 at every template key of this edit (its searched δ written there),
    and as ``edited_weight`` grows the applied edits' keys get less of the change (``wᵀk_p`` → 0);
    with no applied edit it is the ``rows`` direction."""
    from mobiedit.methods.common import ModelContext
    from mobiedit.methods.rome import _direction

    c, keys = _case(seed=2)
    g = torch.Generator().manual_seed(5)
    prior = [keys.mean(0) + 0.8 * torch.randn(keys.shape[1], generator=g) for _ in range(3)]
    rows = UpdateConfig(rule="rows", rows_ridge=1e-9)
    assert torch.allclose(_direction(ModelContext(templates=[], mom2={0: c}), 0, keys, 1e-9, rows),
                          _direction(ModelContext(templates=[], mom2={0: c}), 0, keys,
                                     1e-9, UpdateConfig(rule="rows-protect", rows_ridge=1e-9)))
    ctx = ModelContext(templates=[], mom2={0: c}, edited_keys={0: prior})
    free = _direction(ctx, 0, keys, 1e-9, rows)
    moved = [float((torch.stack(prior) @ free).abs().max())]
    for weight in (1.0, 100.0):
        w = _direction(ctx, 0, keys, 1e-9, UpdateConfig(rule="rows-protect", rows_ridge=1e-9, edited_weight=weight))
        assert torch.allclose(keys @ w, torch.ones(keys.shape[0]), atol=1e-3)
        moved.append(float((torch.stack(prior) @ w).abs().max()))
    assert moved[0] > moved[1] > moved[2]
