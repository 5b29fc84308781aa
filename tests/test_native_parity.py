"""Native engine (mobiedit._native) vs the numpy reference: identical perturbations, deltas,
stop steps/statuses and rank-one factors (spec: docs/zo_spec.md, preamble)."""
from __future__ import annotations

import itertools
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mobiedit import _native
from mobiedit.zo import ZOConfig, ZOLoop, rank_one_factors, run_zo
from mobiedit.zo import rng
from mobiedit.zo.native_backend import native_config

D = 37  # not a multiple of 4: exercises the discarded tail words
TARGET = np.sin(np.arange(D, dtype=np.float64)).astype(np.float32)


def wiggly(D_batch: np.ndarray) -> np.ndarray:
    """A non-quadratic loss: ||x - t||^2 + 0.1 sum sin(3 x)."""
    x = D_batch.astype(np.float64)
    return (((x - TARGET) ** 2).sum(axis=1) + 0.1 * np.sin(3 * x).sum(axis=1)).astype(np.float32)


class Recorder:
    """Forward that records every batch it is given (copied)."""

    def __init__(self, fn=wiggly):
        self.fn = fn
        self.batches: list[np.ndarray] = []

    def __call__(self, D_batch: np.ndarray) -> np.ndarray:
        self.batches.append(np.array(D_batch, copy=True))
        return self.fn(D_batch)


def run_both(cfg: ZOConfig, fn=wiggly, check=None, x0=None):
    x0 = np.zeros(D, np.float32) if x0 is None else x0
    rec_py, rec_nat = Recorder(fn), Recorder(fn)
    py = run_zo(rec_py, check, x0, cfg, backend="python")
    nat = run_zo(rec_nat, check, x0, cfg, backend="native")
    return py, nat, rec_py, rec_nat


def assert_same_run(py, nat, rec_py, rec_nat, exact: bool) -> None:
    assert (nat.status, nat.steps, nat.evals, nat.checks) == \
        (py.status, py.steps, py.evals, py.checks)
    assert len(rec_nat.batches) == len(rec_py.batches) == py.steps
    for a, b in zip(rec_py.batches, rec_nat.batches, strict=True):
        if exact:
            np.testing.assert_array_equal(b, a)
        else:
            np.testing.assert_allclose(b, a, rtol=0, atol=1e-6)
    np.testing.assert_allclose(nat.x, py.x, rtol=0, atol=1e-6)
    np.testing.assert_allclose(nat.history, py.history, rtol=1e-6)
    if exact:
        np.testing.assert_array_equal(nat.x, py.x)
        assert nat.history == py.history


# --- perturbations ---------------------------------------------------------------------------

@pytest.mark.parametrize("seed", [0, 1, 2**32 - 1, 2**32, 0x123456789ABCDEF, 2**64 - 1])
@pytest.mark.parametrize("d", [1, 3, 4, 37, 2048])
def test_rademacher_bitwise_identical(seed, d):
    for step in (0, 1, 977):
        nat = _native.directions("rademacher", seed, step, 5, d)
        np.testing.assert_array_equal(nat, rng.rademacher(seed, step, 5, d))
        assert nat.dtype == np.float32 and nat.shape == (5, d)


@pytest.mark.parametrize("seed", [0, 7, 2**40 + 3])
@pytest.mark.parametrize("d", [1, 6, 37, 2048])
def test_gaussian_within_1e6(seed, d):
    for step in (0, 5):
        nat = _native.directions("gaussian", seed, step, 8, d)
        np.testing.assert_allclose(nat, rng.gaussian(seed, step, 8, d), rtol=0, atol=1e-6)


def test_stream_argument_parity():
    np.testing.assert_array_equal(_native.directions("rademacher", 3, 2, 2, 9, stream=4),
                                  rng.rademacher(3, 2, 2, 9, stream=4))


@settings(max_examples=200, deadline=None)
@given(st.tuples(*[st.integers(0, 2**32 - 1)] * 4), st.tuples(*[st.integers(0, 2**32 - 1)] * 2))
def test_philox_block_parity(counter, key):
    want = tuple(int(w) for w in rng.philox4x32_10(counter, key))
    assert tuple(_native.philox4x32_10(counter, key)) == want


# --- whole runs ------------------------------------------------------------------------------

COMBOS = list(itertools.product(("paper", "fzoo", "antithetic"), ("sgd", "adam"),
                                ("constant", "cosine")))


@pytest.mark.parametrize("estimator,optimizer,schedule", COMBOS)
def test_run_parity_every_combination(estimator, optimizer, schedule):
    cfg = ZOConfig(estimator=estimator, optimizer=optimizer, lr_schedule=schedule, n_dirs=4,
                   h=1e-2, lr=0.02, lr_min=0.002, momentum=0.7 if optimizer == "sgd" else 0.0,
                   max_norm=2.0, max_steps=40, seed=2024)
    py, nat, rec_py, rec_nat = run_both(cfg)
    assert_same_run(py, nat, rec_py, rec_nat, exact=estimator != "paper")
    assert py.history[-1] < py.history[0]


def _flat(D_batch):
    return np.ones(D_batch.shape[0], np.float32)


def _nan_at(n):
    calls = []

    def forward(D_batch):
        calls.append(1)
        L = wiggly(D_batch)
        if len(calls) == n:
            L[0] = np.nan
        return L

    return forward


def _check_after(n):
    calls = []
    return lambda x: (calls.append(1), len(calls) >= n)[1]


STATUS_CASES = {
    "SUCCESS_LOSS": (dict(estimator="fzoo", loss_tol=5.0), wiggly, None),
    "SUCCESS_CHECK": (dict(estimator="antithetic", check_every=3), wiggly, 3),
    "SUCCESS_CHECK-base": (dict(estimator="fzoo", check_every=2, check_at="base"), wiggly, 3),
    "PLATEAU": (dict(estimator="fzoo", patience=3, min_rel_improve=0.1), _flat, None),
    "BUDGET": (dict(estimator="paper", n_dirs=2, max_evals=50), wiggly, None),
    "MAX_STEPS": (dict(estimator="antithetic", max_steps=17), wiggly, None),
    "NONFINITE": (dict(estimator="fzoo"), 6, None),
}


@pytest.mark.parametrize("status", sorted(STATUS_CASES))
def test_stop_status_and_step_parity(status):
    kwargs, fn, check_n = STATUS_CASES[status]
    cfg = ZOConfig(**{**dict(n_dirs=4, h=1e-2, lr=0.05, max_steps=200, seed=5), **kwargs})
    results = []
    for backend in ("python", "native"):
        forward = _nan_at(fn) if isinstance(fn, int) else fn
        check = _check_after(check_n) if check_n else None
        rec = Recorder(forward)
        results.append((run_zo(rec, check, np.full(D, 0.2, np.float32), cfg, backend=backend), rec))
    (py, rec_py), (nat, rec_nat) = results
    assert py.status.value == status.split("-")[0]
    assert_same_run(py, nat, rec_py, rec_nat, exact=cfg.estimator != "paper")
    assert nat.backend == "native" and py.backend == "python"


def test_step_api_parity():
    cfg = ZOConfig(estimator="antithetic", n_dirs=3, max_steps=12, lr=0.05, seed=9)
    loop = ZOLoop(cfg, np.zeros(D, np.float32))
    eng = _native.Engine(native_config(_native, cfg), D)
    while loop.status.value == "RUNNING":
        s_py = loop.step(wiggly)
        s_nat = eng.step(wiggly)
        assert s_nat == s_py.value
        np.testing.assert_array_equal(eng.x, loop.x)
    assert eng.steps == loop.steps == 12 and eng.status == "MAX_STEPS"


@settings(max_examples=25, deadline=None)
@given(estimator=st.sampled_from(["paper", "fzoo", "antithetic"]),
       optimizer=st.sampled_from(["sgd", "adam"]), n_dirs=st.integers(1, 6),
       d=st.integers(1, 40), seed=st.integers(0, 2**64 - 1), steps=st.integers(1, 15),
       h=st.sampled_from([1e-3, 1e-2, 0.1]), max_norm=st.sampled_from([0.0, 0.5, 5.0]))
def test_random_config_parity(estimator, optimizer, n_dirs, d, seed, steps, h, max_norm):
    cfg = ZOConfig(estimator=estimator, optimizer=optimizer, n_dirs=n_dirs, h=h, lr=0.03,
                   max_steps=steps, seed=seed, max_norm=max_norm, momentum=0.5)
    t = np.cos(np.arange(d)).astype(np.float32)

    def fn(Db):
        return ((Db.astype(np.float64) - t) ** 2).sum(axis=1).astype(np.float32)

    x0 = np.linspace(-0.3, 0.3, d).astype(np.float32)
    py = run_zo(fn, None, x0, cfg, backend="python")
    nat = run_zo(fn, None, x0, cfg, backend="native")
    assert (nat.status, nat.steps) == (py.status, py.steps)
    np.testing.assert_allclose(nat.x, py.x, rtol=0, atol=1e-6)
    if estimator != "paper":
        np.testing.assert_array_equal(nat.x, py.x)


def test_two_engines_in_threads_match_sequential_runs():
    cfgs = [ZOConfig(estimator=e, n_dirs=4, max_steps=60, seed=s)
            for e, s in (("fzoo", 1), ("antithetic", 2))]
    sequential = [run_zo(wiggly, None, np.zeros(D, np.float32), c, backend="native") for c in cfgs]
    out: list = [None, None]

    def work(i):
        out[i] = run_zo(wiggly, None, np.zeros(D, np.float32), cfgs[i], backend="native")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    for got, want in zip(out, sequential, strict=True):
        assert got is not None
        np.testing.assert_array_equal(got.x, want.x)
        assert got.history == want.history


# --- rank-one --------------------------------------------------------------------------------

@pytest.mark.parametrize("d_in,d_out,with_c", [(1, 1, False), (7, 5, True), (256, 64, True),
                                               (300, 1, False)])
def test_rank_one_parity(d_in, d_out, with_c):
    r = np.random.default_rng(d_in * 31 + d_out)
    k = r.standard_normal(d_in).astype(np.float32)
    v = r.standard_normal(d_out).astype(np.float32)
    wk = r.standard_normal(d_out).astype(np.float32)
    c = (k + 0.05 * r.standard_normal(d_in)).astype(np.float32) if with_c else None
    u_py, w_py = rank_one_factors(k, v, wk, c)
    u_nat, w_nat = _native.rank_one(k, v, wk, c)
    np.testing.assert_allclose(u_nat, u_py, rtol=1e-6)
    np.testing.assert_allclose(w_nat, w_py, rtol=1e-6)
    np.testing.assert_array_equal(u_nat, u_py)
    np.testing.assert_array_equal(w_nat, w_py)
