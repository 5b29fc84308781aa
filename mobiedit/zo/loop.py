"""The loop driver of spec §4, in pure Python/numpy: the reference the native engine must match.

:class:`ZOLoop` is a small state machine (``step`` performs one iteration of the spec's loop;
``run`` repeats it until a status is reached) so that it has the same shape as the native
engine's C ABI (``mobiedit_step``). Callbacks:

* ``forward(D)`` gets the ``[K, d]`` float32 deltas (read-only) and returns K losses (anything
  numpy can turn into K floats; a torch tensor is detached first);
* ``check(x)`` gets the current ``[d]`` float32 delta and returns a truthy success flag.

A callback that raises propagates its exception unchanged; one that returns the wrong number of
losses raises :class:`MobiEditError`. NaN/Inf losses or deltas end the run with status NONFINITE
(x is then the last finite delta), never with an exception.
"""
from __future__ import annotations

import logging
import math
from typing import Any, Callable, Optional

import numpy as np

from mobiedit.errors import MobiEditError
from mobiedit.zo.config import ZOConfig, ZOResult, ZOStatus
from mobiedit.zo.estimators import make_estimator
from mobiedit.zo.optim import clamp_norm, lr_at, make_optimizer

__all__ = ["Forward", "Check", "ZOConfig", "ZOResult", "ZOStatus", "ZOLoop", "run_python",
           "coerce_losses", "coerce_x0"]

log = logging.getLogger(__name__)

Forward = Callable[[np.ndarray], Any]
Check = Callable[[np.ndarray], Any]


def _to_numpy(value: Any) -> Any:
    """Turn a torch tensor into a numpy array (detached, on CPU); leave anything else alone."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        return value.detach().cpu().numpy()
    return value


def coerce_losses(out: Any, K: int) -> np.ndarray:
    """Return ``forward``'s output as a contiguous float32 array of exactly K losses.

    Raises:
        MobiEditError: if it is not numeric or does not hold exactly K values.
    """
    try:
        arr = np.asarray(_to_numpy(out))
    except Exception as exc:  # noqa: BLE001 - any conversion failure is the caller's type error
        raise MobiEditError(f"forward returned {type(out).__name__}, not numbers ({exc})",
                            where="forward callback", fix="return K float losses") from exc
    if arr.dtype.kind not in "fiu":
        raise MobiEditError(f"forward returned dtype {arr.dtype}, expected floats",
                            where="forward callback", fix="return K float losses")
    if arr.size != K:
        raise MobiEditError(f"forward returned {arr.size} losses (shape {arr.shape}), expected "
                            f"{K}", where="forward callback",
                            fix="return one loss per row of D (shape [K])")
    return np.ascontiguousarray(arr.reshape(K), dtype=np.float32)


def coerce_x0(x0: Any) -> np.ndarray:
    """Return ``x0`` as a fresh contiguous float32 ``[d]`` array (d >= 1).

    Raises:
        MobiEditError: if it is not a non-empty 1-D floating array.
    """
    try:
        arr = np.asarray(_to_numpy(x0))
    except Exception as exc:  # noqa: BLE001 - ragged lists, objects numpy cannot convert
        raise MobiEditError(f"x0 is a {type(x0).__name__} numpy cannot convert to an array ({exc})",
                            where="x0", fix="pass a 1-D float32 array (np.zeros(d, np.float32))") from None
    if arr.dtype.kind != "f":
        raise MobiEditError(f"x0 has dtype {arr.dtype}, expected a floating dtype", where="x0",
                            fix="pass a 1-D float32 array (np.zeros(d, np.float32))")
    if arr.ndim != 1 or arr.shape[0] < 1:
        raise MobiEditError(f"x0 has shape {arr.shape}, expected (d,) with d >= 1", where="x0",
                            fix="pass a 1-D float32 array of the delta's length")
    if not np.all(np.isfinite(arr)):
        raise MobiEditError("x0 contains NaN or Inf", where="x0", fix="pass a finite start delta")
    return np.array(arr, dtype=np.float32, order="C", copy=True)


class ZOLoop:
    """One run of the value search. Invariant: ``status`` is RUNNING until a stop rule fires."""

    def __init__(self, cfg: ZOConfig, x0: np.ndarray) -> None:
        self.cfg = cfg
        self.x = coerce_x0(x0)
        d = self.x.shape[0]
        self.estimator = make_estimator(cfg.estimator, cfg.n_dirs, cfg.h, cfg.seed, d,
                                        cfg.directions, cfg.normalise)
        self.optimizer = make_optimizer(cfg.optimizer, d, cfg.momentum, cfg.beta1, cfg.beta2,
                                        cfg.adam_eps)
        self.K = self.estimator.K
        self.step_idx = 0
        self.steps = 0
        self.evals = 0
        self.checks = 0
        self.best = math.inf
        self.since_best = 0
        self.history: list[float] = []
        self.status = ZOStatus.RUNNING
        self.message = ""

    def _finish(self, status: ZOStatus, message: str = "") -> ZOStatus:
        self.status = status
        self.message = message
        return status

    def step(self, forward: Forward, check: Optional[Check] = None) -> ZOStatus:
        """Run one iteration of the spec's loop; return the status (RUNNING if not finished).

        Raises:
            MobiEditError: if called after the run finished, or forward returned a wrong count.
            Exception: whatever a callback raised, unchanged.
        """
        if self.status is not ZOStatus.RUNNING:
            raise MobiEditError(f"run already finished with {self.status.value}",
                                where="ZOLoop.step", fix="start a new ZOLoop")
        cfg, step = self.cfg, self.step_idx
        if self.evals + self.K > cfg.max_evals:
            return self._finish(ZOStatus.BUDGET)
        D = self.estimator.propose(self.x, step)
        D.setflags(write=False)  # same contract as the native backend's read-only view
        self.steps += 1
        L = self._call("forward", step, lambda: coerce_losses(forward(D), self.K))
        self.evals += self.K
        if not np.all(np.isfinite(L)):
            return self._finish(ZOStatus.NONFINITE, f"non-finite loss at step {step}")
        with np.errstate(over="ignore", invalid="ignore"):  # overflow is reported as NONFINITE
            g, base = self.estimator.estimate(self.x, step, D, L)
        self.history.append(base)
        if cfg.loss_tol > 0.0 and base < cfg.loss_tol:
            return self._finish(ZOStatus.SUCCESS_LOSS)
        if cfg.check_at == "base" and self._check_passes(check, step, step):
            return self._finish(ZOStatus.SUCCESS_CHECK)
        self._track_best(base)
        return self._update_and_test(g, step, check)

    def _call(self, name: str, step: int, fn: Callable[[], Any]) -> Any:
        """Run a callback; if it raises, end the run with status ERROR and re-raise."""
        try:
            return fn()
        except BaseException as exc:
            self._finish(ZOStatus.ERROR, f"{name} callback raised at step {step}: {exc!r}")
            raise

    def _track_best(self, base: float) -> None:
        if base < self.best * (1.0 - self.cfg.min_rel_improve):
            self.best = base
            self.since_best = 0
        else:
            self.since_best += 1

    def _update_and_test(self, g: np.ndarray, step: int, check: Optional[Check]) -> ZOStatus:
        cfg = self.cfg
        lr_t = lr_at(step, cfg.lr, cfg.lr_min, cfg.lr_schedule, cfg.max_steps)
        with np.errstate(over="ignore", invalid="ignore"):
            x_new = clamp_norm(self.optimizer.update(self.x, g, step, lr_t), cfg.max_norm)
        if not np.all(np.isfinite(x_new)):
            return self._finish(ZOStatus.NONFINITE, f"non-finite delta after update at step {step}")
        self.x = x_new
        self.step_idx = step + 1
        if cfg.check_at == "update" and self._check_passes(check, step, step + 1):
            return self._finish(ZOStatus.SUCCESS_CHECK)
        if cfg.patience > 0 and self.since_best >= cfg.patience:
            return self._finish(ZOStatus.PLATEAU)
        if self.step_idx >= cfg.max_steps:
            return self._finish(ZOStatus.MAX_STEPS)
        return ZOStatus.RUNNING

    def _check_passes(self, check: Optional[Check], step: int, point: int) -> bool:
        """``check(x)`` where x is the loop's ``point``-th delta (0: the start), every
        ``check_every``-th one from the first update on; False without a check."""
        if check is None or point < 1 or point % self.cfg.check_every != 0:
            return False
        self.checks += 1
        return bool(self._call("check", step, lambda: bool(check(self.x.copy()))))

    def run(self, forward: Forward, check: Optional[Check] = None) -> ZOResult:
        """Step until a status is reached and return the result."""
        while self.status is ZOStatus.RUNNING:
            self.step(forward, check)
        log.info("zo[python] %s after %d steps, %d evals, last loss %s", self.status.value,
                 self.steps, self.evals, self.history[-1] if self.history else None)
        return self.result()

    def result(self) -> ZOResult:
        """Snapshot of the current state (x is a copy)."""
        return ZOResult(status=self.status, x=self.x.copy(), steps=self.steps, evals=self.evals,
                        history=list(self.history), checks=self.checks, backend="python",
                        message=self.message)


def run_python(forward: Forward, check: Optional[Check], x0: Any, cfg: ZOConfig) -> ZOResult:
    """Run the reference loop from ``x0`` under ``cfg`` (see module docstring for contracts)."""
    return ZOLoop(cfg, x0).run(forward, check)
