"""Coordinate directions (``ZOConfig.directions="coordinates"``, issue 18): the draw's contract
(rng.py's module docstring), bit-identical native draws, and whole runs identical across backends."""
from __future__ import annotations

import numpy as np
import pytest

from mobiedit import _native
from mobiedit.errors import ConfigError
from mobiedit.zo import ZOConfig, run_zo
from mobiedit.zo import rng

D = 37


def _quadratic(D_batch: np.ndarray) -> np.ndarray:
    t = np.cos(np.arange(D_batch.shape[1], dtype=np.float64))
    return ((D_batch.astype(np.float64) - t) ** 2).sum(axis=1).astype(np.float32)


@pytest.mark.parametrize("d,n", [(1, 1), (1, 3), (8, 4), (37, 5), (37, 37), (576, 16)])
def test_a_cycle_is_a_signed_permutation(d, n):
    steps = -(-3 * d // n)  # three cycles at least
    u = np.concatenate([rng.coordinates(11, s, n, d) for s in range(steps)])
    assert u.dtype == np.float32 and u.shape == (steps * n, d)
    assert ((u != 0).sum(axis=1) == 1).all()
    np.testing.assert_array_equal(np.abs(u[u != 0]), np.float32(np.sqrt(d)))
    for c in range(3):  # each cycle covers every coordinate once: U^T U = d I
        cyc = u[c * d:(c + 1) * d].astype(np.float64)
        np.testing.assert_allclose(cyc.T @ cyc, d * np.eye(d), rtol=1e-6, atol=0)


def test_cycles_and_seeds_draw_different_orders():
    p0, s0 = rng.coordinate_cycle(5, 0, 64)
    p1, _ = rng.coordinate_cycle(5, 1, 64)
    q0, _ = rng.coordinate_cycle(6, 0, 64)
    assert sorted(p0.tolist()) == list(range(64))
    assert not np.array_equal(p0, p1) and not np.array_equal(p0, q0)
    assert 10 < int((s0 > 0).sum()) < 54  # signs are not constant


def test_known_answer_of_the_draw():
    """Pinned so a change to the draw (and so to every recipe's edits) cannot pass silently."""
    p, s = rng.coordinate_cycle(3, 0, 10)
    assert p.tolist() == [2, 0, 9, 5, 8, 3, 1, 4, 6, 7]
    assert s.tolist() == [-1, 1, 1, 1, -1, -1, -1, -1, 1, -1]


@pytest.mark.parametrize("seed", [0, 3, 2**32 + 5, 2**64 - 1])
@pytest.mark.parametrize("d", [1, 4, 37, 640])
def test_native_draws_bitwise_identical(seed, d):
    for step, n in ((0, 5), (1, 16), (977, 3), (2**31 - 1, 16), (2**32 - 1, 1)):
        nat = _native.directions("coordinates", seed, step, n, d)
        np.testing.assert_array_equal(nat, rng.coordinates(seed, step, n, d))


def test_directions_dispatch_and_unknown_kind():
    np.testing.assert_array_equal(rng.directions("coordinates", 1, 2, 3, 9), rng.coordinates(1, 2, 3, 9))
    with pytest.raises(ConfigError, match="coordinates"):
        rng.directions("sobol", 1, 2, 3, 9)
    with pytest.raises(ValueError, match="coordinates"):
        _native.directions("sobol", 1, 2, 3, 9)


def test_config_field_is_validated_in_both_backends():
    with pytest.raises(ConfigError) as e:
        ZOConfig(directions="orthogonal")
    assert e.value.where == "ZOConfig.directions" and "coordinates" in e.value.fix
    c = _native.Config()
    assert c.directions == "iid"
    c.directions = "coordinates"
    assert c.directions == "coordinates"
    with pytest.raises(ConfigError, match="directions"):
        c.directions = "orthogonal"


@pytest.mark.parametrize("estimator", ["paper", "fzoo", "antithetic"])
@pytest.mark.parametrize("optimizer", ["sgd", "adam"])
def test_whole_runs_identical_across_backends(estimator, optimizer):
    lr = 0.002 if (estimator, optimizer) == ("paper", "sgd") else 0.05  # paper's g is unnormalised
    cfg = ZOConfig(estimator=estimator, optimizer=optimizer, n_dirs=6, h=1e-2, lr=lr,
                   max_steps=60, seed=99, directions="coordinates")
    py = assert_backends_agree(cfg, _quadratic, D)
    assert py.history[-1] < 0.9 * py.history[0]  # the search makes progress on the quadratic


def assert_backends_agree(cfg: ZOConfig, loss, d: int):
    """Run ``cfg`` from zeros on both backends; assert identical rows (bit for bit), stop, delta
    and loss history; return the Python run."""
    seen = {}
    for backend in ("python", "native"):
        batches = []

        def fwd(D_batch, batches=batches):
            batches.append(np.array(D_batch, copy=True))
            return loss(D_batch)

        seen[backend] = (run_zo(fwd, None, np.zeros(d, np.float32), cfg, backend=backend), batches)
    (py, b_py), (nat, b_nat) = seen["python"], seen["native"]
    assert (py.status, py.steps, py.evals) == (nat.status, nat.steps, nat.evals)
    for a, b in zip(b_py, b_nat, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(py.x, nat.x)
    assert py.history == nat.history
    return py


def test_a_step_perturbs_only_its_coordinates():
    """FZOO's rows differ from x in exactly one coordinate each (the search's contract)."""
    cfg = ZOConfig(estimator="fzoo", n_dirs=4, h=0.1, max_steps=1, directions="coordinates")
    rows = []
    run_zo(lambda Db: (rows.append(Db.copy()), _quadratic(Db))[1], None, np.zeros(D, np.float32),
           cfg, backend="python")
    diff = rows[0][1:] - rows[0][0]
    assert ((diff != 0).sum(axis=1) == 1).all()
