"""Forward-only zeroth-order (ZO) value search (spec: ``docs/zo_spec.md``).

Entry point: :func:`run_zo`. Two backends compute the same numbers: ``"native"`` (the C++
engine, ``mobiedit._native``; the default) and ``"python"`` (the numpy reference in this
package, the test oracle). Submodules: ``rng`` (Philox4x32-10), ``estimators``, ``optim``,
``loop`` (driver), ``rank_one`` (ROME factors), ``bench_overhead``.
"""
from __future__ import annotations

from typing import Any, Optional

from mobiedit.errors import ConfigError
from mobiedit.zo.config import ZOConfig, ZOResult, ZOStatus
from mobiedit.zo.loop import Check, Forward, ZOLoop, run_python
from mobiedit.zo.native_backend import load_native, run_native
from mobiedit.zo.rank_one import apply_rank_one, rank_one_factors

__all__ = ["run_zo", "ZOConfig", "ZOResult", "ZOStatus", "ZOLoop", "rank_one_factors",
           "apply_rank_one", "load_native", "BACKENDS"]

BACKENDS = ("native", "python")


def run_zo(forward: Forward, check: Optional[Check], x0: Any, cfg: ZOConfig,
           backend: str = "native") -> ZOResult:
    """Search a delta that minimises ``forward``'s losses, starting from ``x0`` (spec §4).

    Args:
        forward: ``forward(D [K, d] float32) -> K losses``. D is only valid during the call.
        check: optional ``check(x [d] float32) -> bool`` success test, called every
            ``cfg.check_every`` steps on the updated delta.
        x0: start delta, a 1-D floating array of length d (converted to float32).
        cfg: the loop's configuration.
        backend: ``"native"`` (C++ engine) or ``"python"`` (numpy reference).

    Returns:
        A :class:`ZOResult`; NaN/Inf ends the run with status NONFINITE (see
        :meth:`ZOResult.raise_for_status`).

    Raises:
        ConfigError: unknown backend, or ``cfg`` is not a ZOConfig.
        MobiEditError: bad ``x0``, forward returned the wrong number of losses, or (native) the
            extension is not built.
        Exception: whatever a callback raised, unchanged.
    """
    if not isinstance(cfg, ZOConfig):
        raise ConfigError(f"cfg is a {type(cfg).__name__}, expected ZOConfig", where="cfg",
                          fix="build it with mobiedit.zo.ZOConfig(...)")
    if backend == "native":
        return run_native(forward, check, x0, cfg)
    if backend == "python":
        return run_python(forward, check, x0, cfg)
    raise ConfigError(f"unknown backend {backend!r}", where="backend",
                      fix=f"use one of {', '.join(BACKENDS)}")
