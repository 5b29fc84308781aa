"""The pure-numpy ZO reference (mobiedit.zo, backend="python") against the spec and against
independent formulas: Philox known answers, estimator formulas, optimizers vs torch, stop rules,
config validation, rank-one algebra."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from mobiedit.errors import ConfigError, MobiEditError, NumericalError
from mobiedit.zo import ZOConfig, ZOStatus, apply_rank_one, rank_one_factors, run_zo
from mobiedit.zo import estimators, optim, rng

D = 24
TARGET = (np.arange(D, dtype=np.float32) % 7 - 3) / 4


def quadratic(D_batch: np.ndarray) -> np.ndarray:
    """L(x) = ||x - TARGET||^2 for each row."""
    return ((D_batch.astype(np.float64) - TARGET) ** 2).sum(axis=1).astype(np.float32)


# --- §1 Philox -------------------------------------------------------------------------------

@pytest.mark.parametrize("counter,key,want", [
    ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
    ((0xFFFFFFFF,) * 4, (0xFFFFFFFF, 0xFFFFFFFF), (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
    ((0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344), (0xA4093822, 0x299F31D0),
     (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1)),
])
def test_philox_known_answers(counter, key, want):
    got = tuple(int(w) for w in rng.philox4x32_10(counter, key))
    assert got == want


def test_philox_is_vectorised_elementwise():
    c0 = np.arange(10, dtype=np.uint32)
    words = rng.philox4x32_10((c0, 3, 5, 0), (11, 12))
    for i in range(10):
        single = rng.philox4x32_10((i, 3, 5, 0), (11, 12))
        assert [int(w[i]) for w in words] == [int(s) for s in single]


def test_seed_to_key_and_bad_seeds():
    assert rng.seed_to_key(0x123456789ABCDEF) == (0x89ABCDEF, 0x01234567)
    for bad in (-1, 2**64, 1.5, True):
        with pytest.raises(ConfigError):
            rng.seed_to_key(bad)


def test_rademacher_layout_matches_counter_words():
    seed, step, n, d = 99, 4, 3, 10
    r = rng.rademacher(seed, step, n, d)
    assert r.dtype == np.float32 and r.shape == (n, d)
    for row in range(n):
        for j in range(d):
            word = int(rng.philox4x32_10((j // 4, row, step, 0), rng.seed_to_key(seed))[j % 4])
            assert r[row, j] == (1.0 if word >> 31 == 0 else -1.0)


def test_gaussian_box_muller_formula_and_moments():
    seed, step = 5, 2
    g = rng.gaussian(seed, step, 1, 4)
    w = [int(x) for x in rng.philox4x32_10((0, 0, step, 0), rng.seed_to_key(seed))]
    u = [(x + 0.5) * 2.0**-32 for x in w]
    r0, r1 = math.sqrt(-2 * math.log(u[0])), math.sqrt(-2 * math.log(u[2]))
    want = [r0 * math.cos(2 * math.pi * u[1]), r0 * math.sin(2 * math.pi * u[1]),
            r1 * math.cos(2 * math.pi * u[3]), r1 * math.sin(2 * math.pi * u[3])]
    np.testing.assert_allclose(g[0], want, rtol=0, atol=1e-6)
    big = rng.gaussian(1, 0, 64, 1024).astype(np.float64)
    assert abs(big.mean()) < 0.02 and abs(big.var() - 1) < 0.03


@pytest.mark.parametrize("kind", ["rademacher", "gaussian"])
def test_short_direction_is_prefix_and_streams_differ(kind):
    a = rng.directions(kind, 3, 1, 2, 13)
    b = rng.directions(kind, 3, 1, 2, 9)
    np.testing.assert_array_equal(a[:, :9], b)
    assert not np.array_equal(rng.directions(kind, 3, 1, 2, 13, stream=1), a)
    assert not np.array_equal(rng.directions(kind, 3, 2, 2, 13), a)
    with pytest.raises(ConfigError):
        rng.directions("uniform", 3, 1, 2, 13)


# --- §2 Estimators ---------------------------------------------------------------------------

def _estimate(name: str, n: int, h: float, x: np.ndarray, losses_fn=quadratic):
    est = estimators.make_estimator(name, n, h, seed=7, d=x.shape[0])
    Db = est.propose(x, 3)
    L = losses_fn(Db)
    g, base = est.estimate(x, 3, Db, L)
    return est, Db, L, g, base


def test_paper_rows_and_formula():
    x = np.linspace(-1, 1, D).astype(np.float32)
    est, Db, L, g, base = _estimate("paper", 4, 1e-2, x)
    u = rng.gaussian(7, 3, 4, D).astype(np.float64)
    assert Db.shape == (12, D) and est.K == 12
    np.testing.assert_allclose(Db[0::3], x + 1e-2 * u, atol=1e-7)
    np.testing.assert_allclose(Db[1::3], x - 1e-2 * u, atol=1e-7)
    np.testing.assert_array_equal(Db[2::3], np.broadcast_to(x, (4, D)))
    L64 = L.astype(np.float64)
    want = np.einsum("i,ij->j", (L64[0::3] - L64[1::3]) / 2e-2, u)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    assert base == pytest.approx(L64[2::3].mean())


def test_fzoo_rows_and_normalised_formula():
    x = np.zeros(D, np.float32)
    est, Db, L, g, base = _estimate("fzoo", 6, 1e-2, x)
    u = rng.rademacher(7, 3, 6, D).astype(np.float64)
    assert Db.shape == (7, D)
    np.testing.assert_array_equal(Db[0], x)
    L64 = L.astype(np.float64)
    raw = (u * ((L64[1:] - L64[0]) / 1e-2)[:, None]).mean(axis=0)
    want = raw / max(np.std(L64[1:]) / 1e-2, 1e-8)
    np.testing.assert_allclose(g, want, rtol=1e-5)
    assert base == L64[0]


def test_fzoo_is_invariant_to_loss_scale():
    x = np.full(D, 0.3, np.float32)
    _, _, _, g1, _ = _estimate("fzoo", 6, 1e-2, x)
    _, _, _, g2, _ = _estimate("fzoo", 6, 1e-2, x, lambda Db: 1000.0 * quadratic(Db))
    np.testing.assert_allclose(g1, g2, rtol=1e-3)


def test_antithetic_rows_and_formula():
    x = np.full(D, 0.1, np.float32)
    _, Db, L, g, base = _estimate("antithetic", 5, 1e-2, x)
    u = rng.rademacher(7, 3, 5, D).astype(np.float64)
    np.testing.assert_allclose(Db[0::2], x + 1e-2 * u, atol=1e-7)
    np.testing.assert_allclose(Db[1::2], x - 1e-2 * u, atol=1e-7)
    L64 = L.astype(np.float64)
    raw = (u * ((L64[0::2] - L64[1::2]) / 2e-2)[:, None]).mean(axis=0)
    np.testing.assert_allclose(g, raw / max(np.std(L64) / 1e-2, 1e-8), rtol=1e-5)
    assert base == pytest.approx(L64.mean())


@pytest.mark.parametrize("name", estimators.ESTIMATORS)
def test_estimated_gradient_points_downhill(name):
    x = np.zeros(D, np.float32)
    _, _, _, g, _ = _estimate(name, 16, 1e-3, x)
    true_grad = 2 * (x - TARGET)
    cos = float(g @ true_grad) / (np.linalg.norm(g) * np.linalg.norm(true_grad))
    assert cos > 0.5


def test_constant_losses_give_zero_gradient():
    for name in estimators.ESTIMATORS:
        _, _, _, g, _ = _estimate(name, 4, 1e-2, np.zeros(D, np.float32),
                                  lambda Db: np.ones(Db.shape[0], np.float32))
        assert not np.any(g)


# --- §3 Optimizers ---------------------------------------------------------------------------

def _grads(steps: int) -> list[np.ndarray]:
    r = np.random.default_rng(1)
    return [r.standard_normal(D).astype(np.float32) for _ in range(steps)]


def test_adam_matches_torch():
    x = np.linspace(-1, 1, D).astype(np.float32)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    opt_t = torch.optim.Adam([xt], lr=0.01, betas=(0.9, 0.99), eps=1e-8)
    ref = optim.Adam(D, 0.9, 0.99, 1e-8)
    for t, g in enumerate(_grads(20)):
        xt.grad = torch.tensor(g, dtype=torch.float64)
        opt_t.step()
        x = ref.update(x, g, t, 0.01)
    np.testing.assert_allclose(x, xt.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_sgd_momentum_matches_torch():
    x = np.linspace(-1, 1, D).astype(np.float32)
    xt = torch.tensor(x, dtype=torch.float64, requires_grad=True)
    opt_t = torch.optim.SGD([xt], lr=0.05, momentum=0.8)
    ref = optim.SGD(D, 0.8)
    for t, g in enumerate(_grads(20)):
        xt.grad = torch.tensor(g, dtype=torch.float64)
        opt_t.step()
        x = ref.update(x, g, t, 0.05)
    np.testing.assert_allclose(x, xt.detach().numpy(), rtol=1e-5, atol=1e-6)


def test_lr_schedules():
    assert optim.lr_at(3, 0.5, 0.0, "constant", 10) == 0.5
    assert optim.lr_at(0, 1.0, 0.1, "cosine", 10) == pytest.approx(1.0)
    assert optim.lr_at(5, 1.0, 0.1, "cosine", 10) == pytest.approx(0.55)
    assert optim.lr_at(10, 1.0, 0.1, "cosine", 10) == pytest.approx(0.1)
    with pytest.raises(ConfigError):
        optim.lr_at(0, 1.0, 0.0, "linear", 10)


def test_clamp_norm():
    x = np.full(4, 3.0, np.float32)
    np.testing.assert_allclose(np.linalg.norm(optim.clamp_norm(x, 2.0)), 2.0, rtol=1e-6)
    np.testing.assert_array_equal(optim.clamp_norm(x, 100.0), x)
    np.testing.assert_array_equal(optim.clamp_norm(x, 0.0), x)


# --- §4 Loop ---------------------------------------------------------------------------------

def _cfg(**kw) -> ZOConfig:
    base = dict(n_dirs=8, h=1e-2, optimizer="adam", lr=0.05, max_steps=300, seed=11)
    base.update(kw)
    return ZOConfig(**base)


@pytest.mark.parametrize("estimator", estimators.ESTIMATORS)
@pytest.mark.parametrize("optimizer", optim.OPTIMIZERS)
def test_every_estimator_reduces_the_loss(estimator, optimizer):
    lr = 0.05 if optimizer == "adam" else (0.01 if estimator == "paper" else 0.05)
    res = run_zo(quadratic, None, np.zeros(D, np.float32),
                 _cfg(estimator=estimator, optimizer=optimizer, lr=lr), backend="python")
    assert res.status is ZOStatus.MAX_STEPS
    assert res.steps == 300 and len(res.history) == 300
    assert res.evals == 300 * _cfg(estimator=estimator).K
    assert res.history[-1] < 0.2 * res.history[0]
    start = float(quadratic(np.zeros((1, D), np.float32))[0])
    assert float(quadratic(res.x[None])[0]) < 0.2 * start


def test_status_success_loss():
    res = run_zo(quadratic, None, np.zeros(D, np.float32), _cfg(estimator="fzoo", loss_tol=1.0),
                 backend="python")
    assert res.status is ZOStatus.SUCCESS_LOSS and res.succeeded
    assert res.history[-1] < 1.0 <= res.history[-2]
    assert float(quadratic(res.x[None])[0]) == pytest.approx(res.history[-1], rel=1e-6)


def test_status_success_check_every():
    calls = []

    def check(x):
        calls.append(x.copy())
        return len(calls) == 2

    res = run_zo(quadratic, check, np.zeros(D, np.float32), _cfg(check_every=5), backend="python")
    assert res.status is ZOStatus.SUCCESS_CHECK
    assert res.steps == 10 and res.checks == 2
    np.testing.assert_array_equal(calls[-1], res.x)


def test_status_plateau():
    res = run_zo(lambda Db: np.ones(Db.shape[0]), None, np.zeros(D, np.float32),
                 _cfg(estimator="fzoo", patience=4, min_rel_improve=0.01), backend="python")
    assert res.status is ZOStatus.PLATEAU and res.steps == 5


def test_status_budget():
    cfg = _cfg(estimator="antithetic", n_dirs=3, max_evals=40)  # K = 6: 6 batches = 36
    res = run_zo(quadratic, None, np.zeros(D, np.float32), cfg, backend="python")
    assert res.status is ZOStatus.BUDGET and res.steps == 6 and res.evals == 36


def test_status_max_steps_with_cosine_and_clamp():
    cfg = _cfg(max_steps=25, lr_schedule="cosine", lr_min=0.001, max_norm=0.5)
    res = run_zo(quadratic, None, np.zeros(D, np.float32), cfg, backend="python")
    assert res.status is ZOStatus.MAX_STEPS and res.steps == 25
    assert np.linalg.norm(res.x) <= 0.5 * (1 + 1e-6)


def test_status_nonfinite_loss_keeps_last_x():
    seen = []

    def forward(Db):
        seen.append(1)
        L = quadratic(Db)
        if len(seen) == 4:
            L[2] = np.inf
        return L

    x0 = np.full(D, 0.5, np.float32)
    ref = run_zo(quadratic, None, x0, _cfg(max_steps=3), backend="python")
    res = run_zo(forward, None, x0, _cfg(), backend="python")
    assert res.status is ZOStatus.NONFINITE and res.steps == 4
    np.testing.assert_array_equal(res.x, ref.x)
    assert len(res.history) == 3
    with pytest.raises(NumericalError):
        res.raise_for_status()


def test_status_nonfinite_update():
    def huge(Db):
        return np.where(np.arange(Db.shape[0]) % 3 == 0, 3e38, -3e38).astype(np.float32)

    res = run_zo(huge, None, np.zeros(D, np.float32), _cfg(optimizer="sgd", lr=1e30),
                 backend="python")
    assert res.status is ZOStatus.NONFINITE and np.all(np.isfinite(res.x))


def test_same_seed_same_run_different_seed_different_run():
    a = run_zo(quadratic, None, np.zeros(D, np.float32), _cfg(max_steps=20), backend="python")
    b = run_zo(quadratic, None, np.zeros(D, np.float32), _cfg(max_steps=20), backend="python")
    c = run_zo(quadratic, None, np.zeros(D, np.float32), _cfg(max_steps=20, seed=12),
               backend="python")
    np.testing.assert_array_equal(a.x, b.x)
    assert not np.array_equal(a.x, c.x)


@pytest.mark.parametrize("field,value", [
    ("estimator", "spsa"), ("n_dirs", 0), ("n_dirs", 2.5), ("h", 0.0), ("h", math.nan),
    ("optimizer", "lion"), ("lr", -1.0), ("lr_min", 1.0), ("lr_schedule", "step"),
    ("momentum", 1.0), ("beta1", -0.1), ("beta2", 1.0), ("adam_eps", 0.0), ("max_norm", -1.0),
    ("max_steps", 0), ("max_evals", 14), ("check_every", 0), ("loss_tol", math.inf),
    ("patience", -1), ("min_rel_improve", 1.0), ("seed", -1), ("seed", 2**64), ("max_steps", True),
])
def test_config_validation_names_the_field(field, value):
    with pytest.raises(ConfigError) as info:
        ZOConfig(**{field: value})
    assert info.value.where == f"ZOConfig.{field}"
    assert info.value.fix


def test_run_zo_rejects_bad_backend_and_cfg():
    with pytest.raises(ConfigError, match="backend"):
        run_zo(quadratic, None, np.zeros(D, np.float32), _cfg(), backend="gpu")
    with pytest.raises(ConfigError, match="ZOConfig"):
        run_zo(quadratic, None, np.zeros(D, np.float32), {"lr": 1.0}, backend="python")


# --- §5 Rank-one -----------------------------------------------------------------------------

def test_rank_one_inserts_the_value():
    r = np.random.default_rng(3)
    W = r.standard_normal((6, 9)).astype(np.float32)
    k = r.standard_normal(9).astype(np.float32)
    c = (k + 0.1 * r.standard_normal(9)).astype(np.float32)
    v = r.standard_normal(6).astype(np.float32)
    u, w = rank_one_factors(k, v, W @ k, c)
    assert u.dtype == w.dtype == np.float32
    assert float(w.astype(np.float64) @ k) == pytest.approx(1.0, rel=1e-6)
    np.testing.assert_allclose(apply_rank_one(W, u, w) @ k, v, rtol=1e-4, atol=1e-5)
    u2, w2 = rank_one_factors(k, v, W @ k)
    np.testing.assert_allclose(w2, k / float(k.astype(np.float64) @ k), rtol=1e-6)
    np.testing.assert_array_equal(u2, u)


def test_rank_one_errors():
    k = np.array([1.0, 0.0], np.float32)
    with pytest.raises(NumericalError, match="c . k"):
        rank_one_factors(k, np.ones(1, np.float32), np.zeros(1, np.float32),
                         np.array([0.0, 1.0], np.float32))
    with pytest.raises(NumericalError):
        rank_one_factors(np.array([np.nan, 1.0], np.float32), np.ones(1), np.ones(1))
    with pytest.raises(MobiEditError, match="w_k"):
        rank_one_factors(k, np.ones(2, np.float32), np.ones(3, np.float32))
    with pytest.raises(MobiEditError, match="dtype"):
        rank_one_factors(np.array([1, 2]), np.ones(1), np.ones(1))
    with pytest.raises(MobiEditError, match="W has shape"):
        apply_rank_one(np.zeros((2, 2), np.float32), np.ones(3, np.float32), np.ones(2, np.float32))


@pytest.mark.parametrize("backend", ["python", "native"])
def test_check_at_base_checks_the_same_points_one_forward_later(backend):
    """``check_at`` "base": the check asks about the point the step's forward just evaluated (FZOO's
    row 0), before its update — the points ``"update"`` checks, each one forward later."""
    from mobiedit.zo import run_zo

    d = 6
    t = np.linspace(-1, 1, d).astype(np.float32)
    seen: dict[str, list] = {"update": [], "base": []}
    rows0: list[np.ndarray] = []
    runs = {}
    for when in ("update", "base"):
        def forward(D, when=when):
            rows0.append(D[0].copy())
            return ((D - t) ** 2).sum(1)

        def check(x, when=when):
            if when == "base":
                assert np.array_equal(x, rows0[-1])  # the row the step just evaluated
            seen[when].append(x.copy())
            return len(seen[when]) == 4

        cfg = ZOConfig(estimator="fzoo", n_dirs=3, h=0.05, lr=0.05, max_steps=50, check_every=2, check_at=when)
        runs[when] = run_zo(forward, check, np.zeros(d, np.float32), cfg, backend=backend)
    assert runs["update"].status.value == runs["base"].status.value == "SUCCESS_CHECK"
    assert runs["base"].steps == runs["update"].steps + 1 == 9
    assert all(np.array_equal(a, b) for a, b in zip(seen["update"], seen["base"], strict=True))
    assert np.array_equal(runs["base"].x, seen["base"][-1]) and np.array_equal(runs["update"].x, seen["update"][-1])
    with pytest.raises(Exception, match="check_at"):
        ZOConfig(check_at="later")
