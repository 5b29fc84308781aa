"""Fuzz targets of the native engine's buffer inputs: ``native.x0`` / ``native.losses`` /
``native.rank_one`` through the public entries :func:`mobiedit.zo.run_zo` (start delta, the loss
buffer the forward callback returns) and :func:`mobiedit.zo.rank_one_factors`, and ``native.raw``
through the raw pybind11 extension (buffers, sizes, config fields; its documented ``TypeError`` /
``ValueError`` count as rejections when they name the argument). :func:`_arrays` draws the
buffer-like values; :func:`_zo_cfg` and :func:`_quad` are a small ZO config and objective.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from mobiedit.errors import MobiEditError

from .fuzz_core import SCALARS, Case


def _arrays(draw) -> Any:
    """A buffer-like value: numpy arrays of any dtype / shape / layout / values, lists (also
    ragged), scalars, strings, None, torch tensors, arbitrary objects."""
    kind = draw(st.sampled_from(["ndarray", "ndarray", "ndarray", "list", "ragged", "scalar", "none", "str",
                                 "torch", "object", "noncontig", "readonly", "bytes"]))
    if kind in ("ndarray", "noncontig", "readonly", "torch"):
        dtype = draw(st.sampled_from([np.float32, np.float32, np.float64, np.float16, np.int32, np.int64,
                                      np.bool_, np.complex64, np.uint8]))
        shape = draw(st.sampled_from([(0,), (1,), (3,), (4,), (6,), (8,), (2, 3), (4, 1), (), (1, 4, 1)]))
        elems = None
        if np.dtype(dtype).kind == "f":
            elems = st.floats(allow_nan=True, allow_infinity=True, width=np.dtype(dtype).itemsize * 8) \
                if draw(st.integers(0, 3)) == 0 else st.floats(-3, 3, width=np.dtype(dtype).itemsize * 8)
        arr = draw(hnp.arrays(dtype, shape, elements=elems))
        if kind == "noncontig" and arr.ndim >= 1:
            arr = np.repeat(arr, 2, axis=0)[::2]
        if kind == "readonly":
            arr.setflags(write=False)
        if kind == "torch":
            import torch

            try:
                return torch.from_numpy(np.ascontiguousarray(arr))
            except TypeError:
                return arr
        return arr
    if kind == "list":
        return draw(st.lists(st.floats(allow_nan=True) | st.integers(-5, 5), max_size=8))
    if kind == "ragged":
        return draw(st.lists(st.lists(st.floats(-2, 2), max_size=3) | st.floats(-2, 2), min_size=2, max_size=4))
    if kind == "scalar":
        return draw(st.floats(allow_nan=True) | st.integers(-5, 5) | st.just(np.float32(1.0)))
    if kind == "none":
        return None
    if kind == "str":
        return draw(st.text(max_size=4))
    if kind == "bytes":
        return draw(st.binary(max_size=8))
    return draw(st.sampled_from([object(), {"a": 1}, {1, 2}, (1.0, "x"), Ellipsis]))


def _zo_cfg(estimator: str = "fzoo"):
    from mobiedit.zo import ZOConfig

    return ZOConfig(estimator=estimator, n_dirs=2, max_steps=3, seed=0)


def _quad(D: np.ndarray) -> np.ndarray:
    return ((D.astype(np.float64) - 0.5) ** 2).sum(axis=1).astype(np.float32)


def native_x0_case(data, work: Path) -> Case:
    from mobiedit.zo import run_zo

    x0 = _arrays(data.draw)
    backend = data.draw(st.sampled_from(["native", "native", "python"]), label="backend")

    def call():
        run_zo(_quad, None, x0, _zo_cfg(), backend=backend).raise_for_status()

    return Case(call, (MobiEditError,), f"{backend} x0={x0!r}"[:300])


def native_losses_case(data, work: Path) -> Case:
    from mobiedit.zo import run_zo

    outs = [_arrays(data.draw) for _ in range(data.draw(st.integers(1, 3), label="n"))]
    good = data.draw(st.booleans(), label="first good")
    backend = data.draw(st.sampled_from(["native", "native", "python"]), label="backend")
    estimator = data.draw(st.sampled_from(["fzoo", "paper", "antithetic"]), label="estimator")
    calls = [0]

    def forward(D):
        calls[0] += 1
        if good and calls[0] == 1:
            return _quad(D)
        return outs[calls[0] % len(outs)]

    def call():
        run_zo(forward, None, np.zeros(4, np.float32), _zo_cfg(estimator), backend=backend).raise_for_status()

    return Case(call, (MobiEditError,), f"{backend} {estimator} losses={outs!r}"[:300])


def native_rank_one_case(data, work: Path) -> Case:
    from mobiedit.zo import rank_one_factors

    k, v, wk = (_arrays(data.draw) for _ in range(3))
    c = _arrays(data.draw) if data.draw(st.booleans(), label="c") else None

    def check(res):
        u, w = res
        if not (np.all(np.isfinite(u)) and np.all(np.isfinite(w))):
            return "non-finite factors"
        return None

    return Case(lambda: rank_one_factors(k, v, wk, c), (MobiEditError,),
                f"k={k!r} v={v!r} wk={wk!r} c={c!r}"[:300], check=check)


def native_raw_case(data, work: Path) -> Case:
    """The raw extension (documented TypeError/ValueError for buffer dtype/shape/layout)."""
    from mobiedit.zo import load_native
    from mobiedit.zo.native_backend import native_config

    native = load_native()
    op = data.draw(st.sampled_from(["x0", "losses", "rank_one", "directions", "engine_d", "config"]), label="op")
    names: tuple[str, ...] = ()
    if op == "x0":
        x0 = _arrays(data.draw)
        eng = native.Engine(native_config(native, _zo_cfg()), 4)
        how = data.draw(st.sampled_from(["run", "reset"]))
        call = (lambda: eng.run(_quad, None, x0)) if how == "run" else (lambda: eng.reset(x0))
        names, desc = ("x0",), f"{how} x0={x0!r}"
    elif op == "losses":
        out = _arrays(data.draw)
        eng = native.Engine(native_config(native, _zo_cfg()), 4)
        call, names, desc = (lambda: eng.run(lambda D: out)), ("forward", "loss"), f"losses={out!r}"
    elif op == "rank_one":
        k, v, wk = (_arrays(data.draw) for _ in range(3))
        c = _arrays(data.draw) if data.draw(st.booleans()) else None
        call = lambda: native.rank_one(k, v, wk, c)  # noqa: E731
        names, desc = ("k_star", "v_star", "w_k", "c", "incompatible function arguments"), \
            f"rank_one k={k!r} v={v!r} wk={wk!r} c={c!r}"
    elif op == "directions":
        args = (data.draw(st.sampled_from(["rademacher", "gaussian", "", "x"])),
                data.draw(st.integers(-1, 2**64) | st.none()), data.draw(st.integers(-2, 3)),
                data.draw(st.integers(-2, 6)), data.draw(st.integers(-2, 6)), data.draw(st.integers(-1, 3)))
        call = lambda: native.directions(*args)  # noqa: E731
        names, desc = ("kind", "rademacher", "n ", "d ", "n=", "d=", "incompatible function arguments",
                       "must be"), f"directions{args!r}"
    elif op == "engine_d":
        d = data.draw(st.integers(-3, 40) | st.floats(allow_nan=True) | st.none() | st.text(max_size=2))
        call = lambda: native.Engine(native_config(native, _zo_cfg()), d)  # noqa: E731
        names, desc = ("delta length", "incompatible", "d "), f"Engine d={d!r}"
    else:
        name = data.draw(st.sampled_from(["n_dirs", "h", "lr", "estimator", "optimizer", "seed", "max_steps",
                                          "max_norm", "beta1", "max_evals"]))
        value = data.draw(SCALARS | st.floats(allow_nan=True))

        def call():
            c = native.Config()
            setattr(c, name, value)
            native.Engine(c, 4)

        names, desc = (name, "incompatible", "unable to convert"), f"Config.{name}={value!r}"
    return Case(call, (MobiEditError,), desc[:300], builtin=(TypeError, ValueError, OverflowError),
                builtin_names=names)
