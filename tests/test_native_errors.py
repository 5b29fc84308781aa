"""Error paths of the native engine and of run_zo: wrong callback returns, raising callbacks,
NaN losses, wrong dtypes/shapes, bad configs, missing extension — always a clear exception or
status, never a crash."""
from __future__ import annotations

import sys

import numpy as np
import pytest

from mobiedit import _native
from mobiedit.errors import ConfigError, MobiEditError, NumericalError
from mobiedit.zo import ZOConfig, ZOStatus, load_native, run_zo
from mobiedit.zo.native_backend import native_config

D = 12
BACKENDS = ("python", "native")


def quad(D_batch: np.ndarray) -> np.ndarray:
    return (D_batch.astype(np.float64) ** 2 - D_batch).sum(axis=1).astype(np.float32)


def cfg(**kw) -> ZOConfig:
    return ZOConfig(**{**dict(estimator="fzoo", n_dirs=4, max_steps=20, seed=1), **kw})


def engine(**kw) -> "_native.Engine":
    return _native.Engine(native_config(_native, cfg(**kw)), D)


def losses_for(D_batch: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(quad(D_batch), dtype=np.float32)


class Boom(Exception):
    pass


# --- callbacks through run_zo (both backends) ------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bad", [lambda Db: np.zeros(3, np.float32),
                                 lambda Db: np.zeros((Db.shape[0] + 1,), np.float32),
                                 lambda Db: np.float32(1.0)])
def test_wrong_number_of_losses(backend, bad):
    with pytest.raises(MobiEditError, match=r"forward callback: forward returned \d+ losses"):
        run_zo(bad, None, np.zeros(D, np.float32), cfg(), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_non_numeric_losses(backend):
    with pytest.raises(MobiEditError, match="forward callback"):
        run_zo(lambda Db: ["a"] * Db.shape[0], None, np.zeros(D, np.float32), cfg(),
               backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_exception_propagates_unchanged(backend):
    err = Boom("forward failed")
    calls = []

    def forward(Db):
        calls.append(1)
        if len(calls) == 3:
            raise err
        return quad(Db)

    with pytest.raises(Boom) as info:
        run_zo(forward, None, np.zeros(D, np.float32), cfg(), backend=backend)
    assert info.value is err
    assert len(calls) == 3


def test_python_loop_records_error_status_when_a_callback_raises():
    from mobiedit.zo import ZOLoop

    loop = ZOLoop(cfg(), np.zeros(D, np.float32))
    with pytest.raises(Boom):
        loop.step(lambda Db: (_ for _ in ()).throw(Boom("x")))
    assert loop.status is ZOStatus.ERROR and "forward callback raised at step 0" in loop.message
    with pytest.raises(MobiEditError, match="already finished"):
        loop.step(quad)


@pytest.mark.parametrize("backend", BACKENDS)
def test_check_exception_propagates_unchanged(backend):
    def check(x):
        raise KeyError("check failed")

    with pytest.raises(KeyError, match="check failed"):
        run_zo(quad, check, np.zeros(D, np.float32), cfg(), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nan_losses_end_nonfinite_without_update(backend):
    x0 = np.linspace(0, 1, D).astype(np.float32)
    res = run_zo(lambda Db: np.full(Db.shape[0], np.nan, np.float32), None, x0, cfg(),
                 backend=backend)
    assert res.status is ZOStatus.NONFINITE
    assert res.steps == 1 and res.history == []
    np.testing.assert_array_equal(res.x, x0)
    assert "non-finite loss at step 0" in res.message
    with pytest.raises(NumericalError):
        res.raise_for_status()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("x0,match", [(np.zeros(D, np.int64), "dtype"),
                                      (np.zeros((2, D), np.float32), "shape"),
                                      (np.zeros(0, np.float32), "shape"),
                                      (np.array([0.0, np.inf], np.float32), "NaN or Inf")])
def test_bad_x0(backend, x0, match):
    with pytest.raises(MobiEditError, match=match) as info:
        run_zo(quad, None, x0, cfg(), backend=backend)
    assert info.value.where == "x0"


def test_float64_x0_is_accepted_by_run_zo_and_converted():
    res = run_zo(quad, None, np.zeros(D, np.float64), cfg(), backend="native")
    assert res.x.dtype == np.float32 and res.status is ZOStatus.MAX_STEPS


# --- the raw extension -----------------------------------------------------------------------

def test_raw_forward_must_return_float32_of_shape_K():
    eng = engine()
    with pytest.raises(TypeError, match="dtype float64, expected float32"):
        eng.run(lambda Db: quad(Db).astype(np.float64))
    assert eng.status == "ERROR"
    with pytest.raises(ValueError, match=r"shape \(3,\), expected \(5,\)"):
        eng.run(lambda Db: np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="must be a numpy.ndarray"):
        eng.run(lambda Db: [0.0] * 5)
    with pytest.raises(ValueError, match="C-contiguous"):
        eng.run(lambda Db: np.zeros(10, np.float32)[::2])
    assert eng.run(losses_for) == "MAX_STEPS"  # the engine is reusable after errors


def test_raw_callback_exception_sets_error_status_and_message():
    eng = engine()
    with pytest.raises(Boom):
        eng.run(lambda Db: (_ for _ in ()).throw(Boom("x")))
    assert eng.status == "ERROR"
    assert "forward callback returned error code at step 0" in eng.message
    with pytest.raises(RuntimeError, match="already finished"):
        eng.step(losses_for)


@pytest.mark.parametrize("x0,exc,match", [
    (np.zeros(D, np.float64), TypeError, "x0 has dtype float64"),
    (np.zeros(D + 1, np.float32), ValueError, r"x0 has shape \(13,\), expected \(12,\)"),
    (np.zeros((D, 2), np.float32)[:, 0], ValueError, "C-contiguous"),
    ([0.0] * D, TypeError, "numpy.ndarray"),
    (np.full(D, np.nan, np.float32), NumericalError, "NaN or Inf"),
])
def test_raw_x0_validation(x0, exc, match):
    with pytest.raises(exc, match=match):
        engine().run(losses_for, None, x0)


def test_raw_deltas_view_is_read_only():
    def forward(Db):
        assert Db.dtype == np.float32 and Db.shape == (5, D) and Db.flags.c_contiguous
        Db[0, 0] = 1.0
        return losses_for(Db)

    with pytest.raises(ValueError, match="read-only"):
        engine().run(forward)


@pytest.mark.parametrize("backend", BACKENDS)
def test_deltas_are_read_only_in_both_backends(backend):
    def forward(Db):
        Db -= 1.0
        return quad(Db)

    with pytest.raises(ValueError, match="read-only"):
        run_zo(forward, None, np.zeros(D, np.float32), cfg(), backend=backend)


def test_raw_non_callable_callbacks():
    with pytest.raises(TypeError, match="forward must be callable"):
        engine().run(42)
    with pytest.raises(TypeError, match="check must be None or callable"):
        engine().run(losses_for, "yes")


def test_raw_check_truthiness_error_propagates():
    class NoBool:
        def __bool__(self):
            raise ZeroDivisionError("no truth value")

    with pytest.raises(ZeroDivisionError):
        engine().run(losses_for, lambda x: NoBool())


def test_reentrant_run_from_callback_is_refused():
    eng = engine()

    def forward(Db):
        eng.run(losses_for)
        return losses_for(Db)

    with pytest.raises(RuntimeError, match="already running"):
        eng.run(forward)
    assert eng.run(losses_for) == "MAX_STEPS"


def test_native_config_errors_are_project_config_errors():
    c = _native.Config()
    c.h = -1.0
    with pytest.raises(ConfigError) as info:
        _native.Engine(c, D)
    assert info.value.where == "ZOConfig.h" and "fix" in str(info.value)
    with pytest.raises(ConfigError, match="estimator"):
        _native.Config().estimator = "spsa"
    with pytest.raises(ValueError, match="delta length 0"):
        _native.Engine(_native.Config(), 0)
    with pytest.raises(TypeError):
        _native.Config().n_dirs = "five"


def test_raw_rank_one_errors():
    k = np.array([1.0, 0.0], np.float32)
    one = np.ones(1, np.float32)
    with pytest.raises(NumericalError, match="c . k"):
        _native.rank_one(k, one, one, np.array([0.0, 1.0], np.float32))
    with pytest.raises(TypeError, match="k_star has dtype float64"):
        _native.rank_one(k.astype(np.float64), one, one)
    with pytest.raises(ValueError, match=r"w_k has shape \(2,\), expected \(1,\)"):
        _native.rank_one(k, one, np.ones(2, np.float32))
    with pytest.raises(ValueError, match="c has shape"):
        _native.rank_one(k, one, one, np.ones(3, np.float32))
    with pytest.raises(ValueError, match="k_star has shape"):
        _native.rank_one(np.zeros(0, np.float32), one, one)


def test_directions_bad_kind():
    with pytest.raises(ValueError, match="rademacher"):
        _native.directions("uniform", 0, 0, 1, 4)


# --- missing extension -----------------------------------------------------------------------

def test_missing_extension_is_an_error_with_build_instructions(monkeypatch):
    monkeypatch.setitem(sys.modules, "mobiedit._native", None)  # makes the import fail
    with pytest.raises(MobiEditError) as info:
        load_native()
    assert "pip install --no-build-isolation -e ." in str(info.value)
    assert "make venv" in str(info.value)
    with pytest.raises(MobiEditError, match="mobiedit._native is not available"):
        run_zo(quad, None, np.zeros(D, np.float32), cfg(), backend="native")
    res = run_zo(quad, None, np.zeros(D, np.float32), cfg(), backend="python")
    assert res.status is ZOStatus.MAX_STEPS
