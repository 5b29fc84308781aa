"""Type stub of the pybind11 extension ``mobiedit._native`` (source: native/python/bindings.cpp).

Arrays must be numpy float32, C-contiguous, of the stated shape: anything else raises TypeError
(dtype / not an ndarray) or ValueError (shape / layout); nothing is converted silently.
Errors of the engine map to ``mobiedit.errors.ConfigError`` (invalid config field),
``mobiedit.errors.NumericalError`` (NaN/Inf, singular c . k*), ValueError (bad argument) and
RuntimeError (wrong state, e.g. re-entering a running Engine).
"""
from typing import Callable, Optional

import numpy as np
import numpy.typing as npt

F32 = npt.NDArray[np.float32]

ABI_VERSION: int

class Config:
    """Loop configuration; same fields and defaults as ``mobiedit.zo.ZOConfig``."""

    estimator: str  # "paper" | "fzoo" | "antithetic"
    optimizer: str  # "sgd" | "adam"
    lr_schedule: str  # "constant" | "cosine"
    directions: str  # "iid" | "coordinates"
    normalise: str  # "spread" | "gradient" (fzoo on coordinates only)
    check_at: str  # "update" | "base" (the check on the step's evaluated point, before its update)
    n_dirs: int
    h: float
    lr: float
    lr_min: float
    momentum: float
    beta1: float
    beta2: float
    adam_eps: float
    max_norm: float
    max_steps: int
    max_evals: int
    check_every: int
    loss_tol: float
    patience: int
    min_rel_improve: float
    seed: int
    def __init__(self) -> None: ...
    @property
    def K(self) -> int:
        """Rows per forward batch for the estimator and n_dirs."""
    def validate(self) -> None:
        """Raise ConfigError naming the first invalid field."""

class Engine:
    """One value-search run (spec §4). Not thread-safe; the GIL is released while it runs."""

    def __init__(self, config: Config, d: int) -> None:
        """Validate ``config`` (ConfigError) and size for deltas of length ``d`` (ValueError)."""
    def reset(self, x0: Optional[F32] = None) -> None:
        """Start a new run at ``x0`` [d] (None: zeros)."""
    def step(
        self,
        forward: Callable[[F32], F32],
        check: Optional[Callable[[F32], object]] = None,
    ) -> str:
        """One loop iteration; returns the status name ("RUNNING" if not finished).

        ``forward(D)`` gets a read-only float32 [K, d] view valid only during the call and must
        return a float32 C-contiguous array of shape (K,). ``check(x)`` gets a float32 [d] copy.
        An exception raised by a callback ends the run with status "ERROR" and propagates.
        """
    def run(
        self,
        forward: Callable[[F32], F32],
        check: Optional[Callable[[F32], object]] = None,
        x0: Optional[F32] = None,
    ) -> str:
        """``reset(x0)`` then ``step`` until done; returns the final status name."""
    @property
    def status(self) -> str: ...
    @property
    def x(self) -> F32:
        """A copy of the current delta [d]."""
    @property
    def history(self) -> list[float]: ...
    @property
    def steps(self) -> int: ...
    @property
    def evals(self) -> int: ...
    @property
    def checks(self) -> int: ...
    @property
    def message(self) -> str: ...
    @property
    def K(self) -> int: ...
    @property
    def d(self) -> int: ...
    @property
    def config(self) -> Config: ...

def philox4x32_10(
    counter: tuple[int, int, int, int], key: tuple[int, int]
) -> tuple[int, int, int, int]:
    """Philox4x32-10 of one counter block (uint32 words)."""

def directions(kind: str, seed: int, step: int, n: int, d: int, stream: int = 0) -> F32:
    """``n`` directions [n, d] ("rademacher" | "gaussian" | "coordinates") exactly as the engine
    draws them."""

def rank_one(k_star: F32, v_star: F32, w_k: F32, c: Optional[F32] = None) -> tuple[F32, F32]:
    """ROME factors ``(u = v* - W k*, w = c / (c . k*))``; c None means c = k*."""
