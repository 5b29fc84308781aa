"""Update rules, learning-rate schedules and the norm clamp (spec §3).

Arithmetic contract (mirrored by ``native/src/optim.cpp``): state vectors (momentum, Adam's m and
v) and x are float32 in memory; each element update is computed in float64 from the widened
float32 values and rounded to float32 once when stored. Scalars (lr_t, bias corrections) are
Python floats computed with libm (``math.cos``, ``**``) exactly as the native code does.
"""
from __future__ import annotations

import math

import numpy as np

from mobiedit.errors import ConfigError

OPTIMIZERS = ("sgd", "adam")
SCHEDULES = ("constant", "cosine")


def lr_at(step: int, lr: float, lr_min: float, schedule: str, max_steps: int) -> float:
    """Learning rate of 0-based ``step``: constant, or cosine from ``lr`` to ``lr_min``.

    Raises:
        ConfigError: for an unknown schedule.
    """
    if schedule == "constant":
        return lr
    if schedule == "cosine":
        return lr_min + (lr - lr_min) * (1.0 + math.cos(math.pi * step / max_steps)) / 2.0
    raise ConfigError(f"unknown lr schedule {schedule!r}", where="lr_schedule",
                      fix=f"use one of {', '.join(SCHEDULES)}")


class SGD:
    """SGD with (heavy-ball) momentum: ``m = beta m + g; x = x - lr_t m``.

    Invariant: ``m`` is float32 of length d and starts at zero.
    """

    def __init__(self, d: int, momentum: float) -> None:
        self.beta = float(momentum)
        self.m = np.zeros(d, dtype=np.float32)

    def update(self, x: np.ndarray, g: np.ndarray, step: int, lr_t: float) -> np.ndarray:
        """Return the new x (float32); ``x`` itself is not modified."""
        self.m = (self.beta * self.m.astype(np.float64) + g.astype(np.float64)).astype(np.float32)
        return (x.astype(np.float64) - lr_t * self.m.astype(np.float64)).astype(np.float32)


class Adam:
    """Adam with bias correction at ``t = step + 1``.

    ``m = b1 m + (1-b1) g``, ``v = b2 v + (1-b2) g g``, ``x -= lr_t mhat / (sqrt(vhat) + eps)``
    with ``mhat = m / (1 - b1^(t))``, ``vhat = v / (1 - b2^(t))`` computed from the stored
    float32 ``m``, ``v``.
    """

    def __init__(self, d: int, beta1: float, beta2: float, eps: float) -> None:
        self.b1, self.b2, self.eps = float(beta1), float(beta2), float(eps)
        self.m = np.zeros(d, dtype=np.float32)
        self.v = np.zeros(d, dtype=np.float32)

    def update(self, x: np.ndarray, g: np.ndarray, step: int, lr_t: float) -> np.ndarray:
        """Return the new x (float32); ``x`` itself is not modified."""
        g64 = g.astype(np.float64)
        self.m = (self.b1 * self.m.astype(np.float64) + (1.0 - self.b1) * g64).astype(np.float32)
        self.v = (self.b2 * self.v.astype(np.float64)
                  + (1.0 - self.b2) * g64 * g64).astype(np.float32)
        bc1 = 1.0 - self.b1 ** (step + 1)
        bc2 = 1.0 - self.b2 ** (step + 1)
        mhat = self.m.astype(np.float64) / bc1
        vhat = self.v.astype(np.float64) / bc2
        return (x.astype(np.float64) - lr_t * mhat / (np.sqrt(vhat) + self.eps)).astype(np.float32)


Optimizer = SGD | Adam


def make_optimizer(name: str, d: int, momentum: float, beta1: float, beta2: float,
                   eps: float) -> Optimizer:
    """Build the optimizer called ``name`` for a delta of length ``d``.

    Raises:
        ConfigError: for an unknown name.
    """
    if name == "sgd":
        return SGD(d, momentum)
    if name == "adam":
        return Adam(d, beta1, beta2, eps)
    raise ConfigError(f"unknown optimizer {name!r}", where="optimizer",
                      fix=f"use one of {', '.join(OPTIMIZERS)}")


def l2_norm(x: np.ndarray) -> float:
    """Euclidean norm of float32 ``x``: squares summed left to right in float64, then sqrt."""
    if x.size == 0:
        return 0.0
    x64 = x.astype(np.float64)
    return math.sqrt(float(np.cumsum(x64 * x64)[-1]))


def clamp_norm(x: np.ndarray, max_norm: float) -> np.ndarray:
    """Scale x onto the ball of radius ``max_norm`` if it lies outside (``max_norm <= 0``: off).

    Returns ``f32(f64(x) * (max_norm / ||x||))`` when ``||x|| > max_norm > 0``, else ``x``.
    """
    if max_norm <= 0.0:
        return x
    norm = l2_norm(x)
    if not norm > max_norm:
        return x
    return (x.astype(np.float64) * (max_norm / norm)).astype(np.float32)
