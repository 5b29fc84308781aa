"""Configuration and result types of the ZO value search (spec §4), shared by both backends.

:class:`ZOConfig` validates itself in ``__post_init__`` and raises
:class:`mobiedit.errors.ConfigError` naming the offending field and how to fix it; a constructed
config is therefore always runnable. :class:`ZOResult` is what both backends return.
"""
from __future__ import annotations

import enum
import math
from dataclasses import dataclass, fields

import numpy as np

from mobiedit.errors import ConfigError, NumericalError
from mobiedit.zo.estimators import DIRECTIONS, ESTIMATORS, check_normalise, rows_per_step
from mobiedit.zo.optim import OPTIMIZERS, SCHEDULES

_U64_MAX = 2**64 - 1
#: when the loop's check runs (spec §4): after the update, on the new delta; or on the step's
#: evaluated point before the update (a static-batch host's check then costs no program call)
CHECK_AT = ("update", "base")
_INT32_MAX = 2**31 - 1


class ZOStatus(str, enum.Enum):
    """Why a run stopped. ``RUNNING`` only while a step-wise run is unfinished."""

    RUNNING = "RUNNING"
    SUCCESS_LOSS = "SUCCESS_LOSS"
    SUCCESS_CHECK = "SUCCESS_CHECK"
    PLATEAU = "PLATEAU"
    BUDGET = "BUDGET"
    MAX_STEPS = "MAX_STEPS"
    NONFINITE = "NONFINITE"
    ERROR = "ERROR"


def _fail(name: str, message: str, fix: str) -> ConfigError:
    return ConfigError(message, where=f"ZOConfig.{name}", fix=fix)


def _check_int(name: str, value: object, lo: int, hi: int) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise _fail(name, f"must be an int, got {type(value).__name__}",
                    f"set {name} to an integer in [{lo}, {hi}]")
    if not lo <= int(value) <= hi:
        raise _fail(name, f"{value} is outside [{lo}, {hi}]", f"set {name} within [{lo}, {hi}]")


def _check_float(name: str, value: object, lo: float, hi: float, *, lo_open: bool = False,
                 hi_open: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise _fail(name, f"must be a number, got {type(value).__name__}",
                    f"set {name} to a finite number")
    v = float(value)
    bad_lo = v <= lo if lo_open else v < lo
    bad_hi = v >= hi if hi_open else v > hi
    if not math.isfinite(v) or bad_lo or bad_hi:
        interval = f"{'(' if lo_open else '['}{lo}, {hi}{')' if hi_open else ']'}"
        raise _fail(name, f"{value!r} is outside {interval}", f"set {name} within {interval}")


def _check_choice(name: str, value: object, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise _fail(name, f"unknown value {value!r}", f"use one of {', '.join(choices)}")


@dataclass(frozen=True)
class ZOConfig:
    """Every knob of the loop (spec §2–§4). Validated on construction (``ConfigError``).

    Invariants after construction: names are known; ``n_dirs, max_steps, check_every >= 1``;
    ``h, lr, adam_eps > 0``; ``0 <= lr_min <= lr``; momentum/betas/min_rel_improve in [0, 1);
    ``max_norm, loss_tol >= 0`` (0 disables); ``patience >= 0`` (0 disables);
    ``max_evals >= K``; ``seed`` in [0, 2**64); ``directions`` ``"iid"`` (the estimator's own
    kind, fresh each step) or ``"coordinates"`` (:func:`mobiedit.zo.rng.coordinates`);
    ``normalise`` ``"spread"`` (the estimator's own step size) or ``"gradient"`` (FZOO on
    coordinates only: :class:`mobiedit.zo.estimators.GradientScaledFzoo`); ``check_at``
    (:data:`CHECK_AT`) ``"update"`` (the check scores the delta a step's update made) or ``"base"``
    (from the second step on, the check asks about the point the step's forward just evaluated,
    before its update — FZOO's row 0, so a host answers it from that row: docs/zo_spec.md §4).
    """

    estimator: str = "paper"
    n_dirs: int = 5
    h: float = 1e-3
    optimizer: str = "adam"
    lr: float = 0.05
    lr_min: float = 0.0
    lr_schedule: str = "constant"
    momentum: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    adam_eps: float = 1e-8
    max_norm: float = 0.0
    max_steps: int = 200
    max_evals: int = 1_000_000
    check_every: int = 1
    loss_tol: float = 0.0
    patience: int = 0
    min_rel_improve: float = 0.0
    seed: int = 0
    directions: str = "iid"
    normalise: str = "spread"
    check_at: str = "update"

    def __post_init__(self) -> None:
        _check_choice("estimator", self.estimator, ESTIMATORS)
        _check_int("n_dirs", self.n_dirs, 1, 1 << 20)
        _check_float("h", self.h, 0.0, math.inf, lo_open=True, hi_open=True)
        _check_choice("optimizer", self.optimizer, OPTIMIZERS)
        _check_float("lr", self.lr, 0.0, math.inf, lo_open=True, hi_open=True)
        _check_float("lr_min", self.lr_min, 0.0, float(self.lr))
        _check_choice("lr_schedule", self.lr_schedule, SCHEDULES)
        _check_float("momentum", self.momentum, 0.0, 1.0, hi_open=True)
        _check_float("beta1", self.beta1, 0.0, 1.0, hi_open=True)
        _check_float("beta2", self.beta2, 0.0, 1.0, hi_open=True)
        _check_float("adam_eps", self.adam_eps, 0.0, math.inf, lo_open=True, hi_open=True)
        _check_float("max_norm", self.max_norm, 0.0, math.inf, hi_open=True)
        _check_int("max_steps", self.max_steps, 1, _INT32_MAX)
        _check_int("max_evals", self.max_evals, self.K, 2**63 - 1)
        _check_int("check_every", self.check_every, 1, _INT32_MAX)
        _check_float("loss_tol", self.loss_tol, 0.0, math.inf, hi_open=True)
        _check_int("patience", self.patience, 0, _INT32_MAX)
        _check_float("min_rel_improve", self.min_rel_improve, 0.0, 1.0, hi_open=True)
        _check_int("seed", self.seed, 0, _U64_MAX)
        _check_choice("directions", self.directions, DIRECTIONS)
        check_normalise(self.normalise, self.estimator, self.directions, where="ZOConfig.normalise")
        _check_choice("check_at", self.check_at, CHECK_AT)
        self._normalise_types()

    def _normalise_types(self) -> None:
        """Store plain Python ints/floats (numpy scalars and int-valued floats converted)."""
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, str):
                continue
            kind = int if f.type in ("int", int) else float
            object.__setattr__(self, f.name, kind(value))

    @property
    def K(self) -> int:  # noqa: N802 - spec name
        """Rows per forward batch for this estimator."""
        return rows_per_step(self.estimator, self.n_dirs)

    def as_dict(self) -> dict[str, object]:
        """The public fields as a plain dict (what the native backend is configured from)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass
class ZOResult:
    """Outcome of a run.

    Attributes:
        status: why it stopped.
        x: the final delta (float32 [d]); for NONFINITE, the last finite delta.
        steps: number of forward calls made.
        evals: loss evaluations (K per forward call).
        history: base loss of each completed estimate, in step order.
        checks: number of ``check`` calls made.
        backend: ``"python"`` or ``"native"``.
        message: detail for NONFINITE / ERROR, else ``""``.
    """

    status: ZOStatus
    x: np.ndarray
    steps: int
    evals: int
    history: list[float]
    checks: int
    backend: str
    message: str = ""

    @property
    def succeeded(self) -> bool:
        """True for SUCCESS_LOSS and SUCCESS_CHECK."""
        return self.status in (ZOStatus.SUCCESS_LOSS, ZOStatus.SUCCESS_CHECK)

    def raise_for_status(self) -> None:
        """Raise :class:`NumericalError` if the run hit NaN/Inf; otherwise do nothing."""
        if self.status is ZOStatus.NONFINITE:
            raise NumericalError(self.message or "non-finite loss or delta", where="zo loop",
                                 fix="lower lr or h, enable max_norm, or check the forward")
