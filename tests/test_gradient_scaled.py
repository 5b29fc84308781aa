"""FZOO's whole-gradient step scale on coordinate directions (``ZOConfig.normalise="gradient"``,
issue 18): the estimate's contract (spec §2), its validation in both backends, and whole runs
bit-identical across the Python reference and the native engine."""
from __future__ import annotations

import math

import numpy as np
import pytest

from mobiedit import _native
from mobiedit.errors import ConfigError
from mobiedit.zo import ZOConfig, run_zo
from mobiedit.zo.estimators import GradientScaledFzoo, make_estimator
from tests.test_coordinate_directions import assert_backends_agree

D = 37


def _weighted_quadratic(D_batch: np.ndarray) -> np.ndarray:
    """Curvature 1..d: coordinates matter unequally (where the spread rule mis-sizes steps)."""
    t = np.cos(np.arange(D_batch.shape[1], dtype=np.float64))
    w = 1.0 + np.arange(D_batch.shape[1], dtype=np.float64)
    return (((D_batch.astype(np.float64) - t) ** 2) * w).sum(axis=1).astype(np.float32)


def _cfg(**kw) -> ZOConfig:
    base = dict(estimator="fzoo", n_dirs=6, h=1e-2, optimizer="sgd", lr=0.05, max_steps=80,
                seed=5, directions="coordinates", normalise="gradient")
    base.update(kw)
    return ZOConfig(**base)


def test_the_table_holds_exact_slopes_and_the_step_moves_only_its_block():
    """On a linear loss every forward difference is the exact slope; a step touches only its
    own coordinates, scaled by sqrt(d) / (sqrt(d / seen) * ||table||)."""
    d, n, h = 16, 4, 0.05
    a = np.linspace(-1.0, 2.0, d)
    est = make_estimator("fzoo", n, h, 0, d, "coordinates", "gradient")
    assert isinstance(est, GradientScaledFzoo)
    x = np.zeros(d, np.float32)
    for step in range(3):
        Db = est.propose(x, step)
        L = (Db.astype(np.float64) @ a).astype(np.float32)
        g, base = est.estimate(x, step, Db, L)
        coords = [int(np.flatnonzero(u)[0]) for u in est.directions(step)]
        np.testing.assert_allclose(est.table[coords], a[coords], rtol=2e-3)
        assert set(np.flatnonzero(g)) <= set(coords) and base == L[0]
        seen = n * (step + 1)
        whole = math.sqrt(d / seen) * math.sqrt(float((est.table ** 2).sum()))
        np.testing.assert_allclose(g[coords], est.table[coords] * math.sqrt(d) / whole, rtol=1e-6)
    assert int(est.seen.sum()) == 12


def test_a_cycle_adds_up_to_one_normalised_gradient_step():
    """Over one cycle (d / n steps at a fixed x) the blocks sum to sqrt(d)·g/||g||."""
    d, n, h = 16, 4, 1e-3
    a = np.random.default_rng(0).normal(size=d)
    est = make_estimator("fzoo", n, h, 3, d, "coordinates", "gradient")
    x = np.zeros(d, np.float32)
    total = np.zeros(d)
    for step in range(d // n):
        Db = est.propose(x, step)
        g, _ = est.estimate(x, step, Db, (Db.astype(np.float64) @ a).astype(np.float32))
        total += g
    # the last step's scale is the full table's; earlier steps used the partial tables' estimate
    assert np.linalg.norm(total) == pytest.approx(math.sqrt(d), rel=0.35)
    assert np.dot(total, a) / (np.linalg.norm(total) * np.linalg.norm(a)) > 0.95


def test_zero_slopes_give_a_zero_step():
    est = make_estimator("fzoo", 3, 0.1, 0, 9, "coordinates", "gradient")
    x = np.zeros(9, np.float32)
    g, base = est.estimate(x, 0, est.propose(x, 0), np.full(4, 2.5, np.float32))
    assert not g.any() and base == 2.5


@pytest.mark.parametrize("kw,why", [
    (dict(directions="iid"), "coordinates"),
    (dict(estimator="antithetic"), "fzoo"),
    (dict(normalise="sigma"), "spread, gradient"),
])
def test_config_is_validated_in_both_backends(kw, why):
    with pytest.raises(ConfigError) as e:
        _cfg(**kw)
    assert e.value.where == "ZOConfig.normalise" and why in (e.value.fix + e.value.message)
    c = _native.Config()
    assert c.normalise == "spread"
    if "normalise" in kw:
        with pytest.raises(ConfigError, match="normalise"):
            c.normalise = kw["normalise"]
        return
    c.estimator, c.directions, c.normalise = "fzoo", "coordinates", "gradient"
    for k, v in kw.items():
        setattr(c, k, v)
    with pytest.raises(ConfigError, match="normalise"):
        _native.Engine(c, 8)


@pytest.mark.parametrize("n_dirs,d", [(6, D), (5, 8), (16, 576), (3, 1)])
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_whole_runs_identical_across_backends(n_dirs, d, momentum):
    """Identical rows, losses, deltas and stop, including steps that straddle two cycles
    (d not a multiple of n) and n > d (one coordinate measured twice in a step)."""
    cfg = _cfg(n_dirs=n_dirs, momentum=momentum, max_steps=max(60, 3 * d // n_dirs))
    py = assert_backends_agree(cfg, _weighted_quadratic, d)
    assert py.history[-1] < 0.9 * py.history[0]


def test_the_table_restarts_with_each_run():
    """A second run of one native engine (reset) repeats the first: no slope carries over."""
    cfg = _cfg(max_steps=30)
    first = run_zo(_weighted_quadratic, None, np.zeros(D, np.float32), cfg, backend="native")
    eng = _native.Engine(_native_config(cfg), D)
    for _ in range(2):
        eng.reset()
        eng.run(lambda Db: _weighted_quadratic(np.asarray(Db)))
        np.testing.assert_array_equal(np.asarray(eng.x), first.x)


def _native_config(cfg: ZOConfig):
    c = _native.Config()
    for k, v in cfg.as_dict().items():
        setattr(c, k, v)
    return c


def test_a_block_that_hardly_matters_moves_little():
    """The reason for the option: FZOO's spread rule sizes each step by its own block's slopes,
    so a block 1000x flatter moves as far as a steep one; the whole-gradient scale moves it
    1000x less (linear loss, one cycle of d / n steps at a fixed x, both backends' rule)."""
    d, n, h = 16, 4, 1e-3
    x = np.zeros(d, np.float32)
    moves = {}
    for normalise in ("spread", "gradient"):
        est = make_estimator("fzoo", n, h, 1, d, "coordinates", normalise)
        per_step = []
        for step in range(d // n):
            Db = est.propose(x, step)
            u = est.directions(step)
            a = np.zeros(d)
            for i, row in enumerate(u):  # row i's slope, along its direction: (i + 1) * size
                p = int(np.flatnonzero(row)[0])
                a[p] = np.sign(row[p]) * (i + 1) * (1.0 if step % 2 == 0 else 1e-3)
            g, _ = est.estimate(x, step, Db, (Db.astype(np.float64) @ a).astype(np.float32))
            per_step.append(float(np.linalg.norm(g)))
        moves[normalise] = per_step
    steep, flat = moves["spread"][2], moves["spread"][3]
    assert flat == pytest.approx(steep, rel=1e-3)  # spread: the flat block moves as far
    steep, flat = moves["gradient"][2], moves["gradient"][3]
    assert flat < 2e-3 * steep  # whole gradient: it moves ~1000x less
