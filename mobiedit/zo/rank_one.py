"""ROME rank-one update factors (spec §5), numpy reference.

Given the key ``k*`` [d_in], the target value ``v*`` [d_out], the current output ``W k*``
[d_out] and ``c = C^-1 k*`` [d_in] (``c = k*`` without the mom2 adjustment)::

    u = v* - W k*              (f32(f64(v) - f64(Wk)), element-wise)
    w = c / (c . k*)           (dot summed left to right in float64; f32(f64(c) / dot))
    W_new = W + u w^T          ([out, in] layout)

The factors ``(u, w)`` are what the journal stores. ``native/src/rank_one.cpp`` computes the
same values bit for bit.
"""
from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from mobiedit.errors import MobiEditError, NumericalError

#: |c . k*| below this (relative to ||c|| ||k*||) makes w meaningless.
MIN_REL_DENOM = 1e-12


def _vector(name: str, value: Any, length: Optional[int] = None) -> np.ndarray:
    """Return ``value`` as a float32 1-D array (of ``length`` if given) or raise naming it."""
    try:
        arr = np.asarray(value)
    except Exception as exc:  # noqa: BLE001 - ragged lists, objects numpy cannot convert
        raise MobiEditError(f"{name} is a {type(value).__name__} numpy cannot convert to an array ({exc})",
                            where=name, fix="pass a 1-D float32 array") from None
    if arr.dtype.kind != "f":
        raise MobiEditError(f"{name} has dtype {arr.dtype}, expected floating", where=name,
                            fix="pass a 1-D float32 array")
    if arr.ndim != 1 or arr.shape[0] < 1 or (length is not None and arr.shape[0] != length):
        want = f"({length},)" if length is not None else "(n,) with n >= 1"
        raise MobiEditError(f"{name} has shape {arr.shape}, expected {want}", where=name,
                            fix="pass 1-D vectors of matching lengths")
    return np.ascontiguousarray(arr, dtype=np.float32)


def seq_dot(a: np.ndarray, b: np.ndarray) -> float:
    """Dot product of float32 vectors: products in float64, summed left to right."""
    return float(np.cumsum(a.astype(np.float64) * b.astype(np.float64))[-1])


def rank_one_factors(k_star: Any, v_star: Any, w_k: Any,
                     c: Any = None) -> tuple[np.ndarray, np.ndarray]:
    """Return the float32 factors ``(u [d_out], w [d_in])`` of ROME's update ``W += u w^T``.

    Args:
        k_star: key vector k* [d_in].
        v_star: target output v* [d_out].
        w_k: current output W k* [d_out].
        c: C^-1 k* [d_in]; ``None`` means ``k_star`` (mom2 adjustment off).

    Raises:
        MobiEditError: wrong dtypes or shapes (message names the argument).
        NumericalError: non-finite inputs, or ``c . k*`` is zero / negligible.
    """
    k = _vector("k_star", k_star)
    v = _vector("v_star", v_star)
    wk = _vector("w_k", w_k, v.shape[0])
    cc = k if c is None else _vector("c", c, k.shape[0])
    for name, arr in (("k_star", k), ("v_star", v), ("w_k", wk), ("c", cc)):
        if not np.all(np.isfinite(arr)):
            raise NumericalError(f"{name} contains NaN or Inf", where=name,
                                 fix="recompute the key/value statistics")
    denom = seq_dot(cc, k)
    scale = math.sqrt(seq_dot(cc, cc)) * math.sqrt(seq_dot(k, k))
    if not math.isfinite(denom) or abs(denom) <= MIN_REL_DENOM * scale or denom == 0.0:
        raise NumericalError(f"c . k* = {denom!r} is zero or negligible", where="c",
                             fix="check the key vector and the covariance inverse")
    u = (v.astype(np.float64) - wk.astype(np.float64)).astype(np.float32)
    w = (cc.astype(np.float64) / denom).astype(np.float32)
    return u, w


def apply_rank_one(W: np.ndarray, u: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Return ``W + u w^T`` for ``W`` in [out, in] layout (a new array, W's dtype).

    Raises:
        MobiEditError: if the shapes do not match.
    """
    if W.ndim != 2 or W.shape != (u.shape[0], w.shape[0]):
        raise MobiEditError(f"W has shape {W.shape}, expected ({u.shape[0]}, {w.shape[0]})",
                            where="W", fix="pass W in [out, in] layout matching u and w")
    return (W + np.outer(u, w).astype(W.dtype)).astype(W.dtype)
