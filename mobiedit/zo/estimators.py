"""Zeroth-order gradient estimators (spec §2): ``paper``, ``fzoo`` and ``antithetic``, and FZOO's
whole-gradient step scale for coordinate directions (``normalise="gradient"``).

Each estimator is a small class with ``propose(x, step) -> D [K, d]`` (the deltas to evaluate) and
``estimate(x, step, D, L) -> (g [d] float32, base_loss float)``.

Arithmetic contract (mirrored operation for operation by ``native/src/estimators.cpp`` so that
the two backends agree bit for bit on Rademacher runs):

* a perturbed row is ``f32(f64(x) + h * f64(u))`` (resp. ``-``), the base row is ``x`` itself;
* losses are widened to float64; every sum runs left to right in float64
  (:func:`seq_sum`, never numpy's pairwise sum or Python's compensated ``sum``);
* ``acc_j = sum_i f64(u_ij) * coef_i`` accumulated over ``i = 0..n-1`` from 0.0;
* the returned gradient is rounded to float32 once, at the end.
"""
from __future__ import annotations

import math
from typing import Callable, Protocol, Sequence

import numpy as np

from mobiedit.errors import ConfigError, MobiEditError
from mobiedit.zo import rng

EPS_SIGMA = 1e-8
ESTIMATORS = ("paper", "fzoo", "antithetic")
#: How directions are drawn: ``iid`` (the estimator's own kind, fresh each step) or
#: ``coordinates`` (signed coordinate vectors, a fresh permutation per cycle of d directions).
DIRECTIONS = ("iid", "coordinates")
#: How FZOO sizes a step: ``spread`` (by the spread of the step's own losses, FZOO's rule) or
#: ``gradient`` (coordinate directions only: by the whole gradient's norm, estimated from the
#: latest slope of every coordinate; :class:`GradientScaledFzoo`).
NORMALISE = ("spread", "gradient")


def seq_sum(values: Sequence[float]) -> float:
    """Sum Python floats left to right in float64 (the native engine's order)."""
    total = 0.0
    for v in values:
        total += v
    return total


def population_std(values: Sequence[float]) -> float:
    """Population standard deviation: ``sqrt(sum((v - mean)^2) / n)`` with sequential sums."""
    n = len(values)
    mean = seq_sum(values) / n
    return math.sqrt(seq_sum([(v - mean) * (v - mean) for v in values]) / n)


def weighted_direction_sum(u: np.ndarray, coef: Sequence[float]) -> np.ndarray:
    """Return float64 ``acc [d] = sum_i f64(u[i]) * coef[i]``, accumulated over i in order."""
    acc = np.zeros(u.shape[1], dtype=np.float64)
    for i, c in enumerate(coef):
        acc += u[i].astype(np.float64) * c
    return acc


def perturb(x: np.ndarray, u: np.ndarray, scale: float) -> np.ndarray:
    """Return ``f32(f64(x) + scale * f64(u))`` row-wise for ``u [n, d]`` (scale may be < 0)."""
    return (x.astype(np.float64)[None, :] + scale * u.astype(np.float64)).astype(np.float32)


def fzoo_normalise(acc: np.ndarray, n: int, losses: Sequence[float], h: float) -> np.ndarray:
    """FZOO step normalisation: ``f32((acc / n) / max(sigma / h, EPS_SIGMA))``."""
    scale = max(population_std(losses) / h, EPS_SIGMA)
    return ((acc / n) / scale).astype(np.float32)


class Estimator(Protocol):
    """What the loop driver needs from an estimator. ``K`` is the forward batch size."""

    name: str

    @property
    def K(self) -> int: ...  # noqa: N802 - spec name

    def propose(self, x: np.ndarray, step: int) -> np.ndarray: ...

    def estimate(self, x: np.ndarray, step: int, D: np.ndarray,
                 L: np.ndarray) -> tuple[np.ndarray, float]: ...


class _Base:
    """Shared state: sizes, seed, and the directions of the step last proposed (cached)."""

    kind = "rademacher"
    name = ""

    def __init__(self, n_dirs: int, h: float, seed: int, d: int,
                 directions: str = "iid") -> None:
        if directions == "coordinates":
            self.kind = "coordinates"
        self.n = n_dirs
        self.h = float(h)
        self.seed = seed
        self.d = d
        self._cached_step = -1
        self._u = np.empty((0, d), dtype=np.float32)

    def directions(self, step: int) -> np.ndarray:
        """Return the ``[n, d]`` float32 directions of ``step`` (stream 0), cached per step."""
        if step != self._cached_step:
            self._u = rng.directions(self.kind, self.seed, step, self.n, self.d,
                                     rng.STREAM_DIRECTIONS)
            self._cached_step = step
        return self._u


class PaperEstimator(_Base):
    """MobiEdit reference: rows ``x + h u_i, x - h u_i, x`` for each of n Gaussian directions.

    ``g = sum_i u_i (L+_i - L-_i) / (2h)``; base loss = mean of the n unperturbed losses.
    """

    kind = "gaussian"
    name = "paper"

    @property
    def K(self) -> int:  # noqa: N802 - spec name
        return 3 * self.n

    def propose(self, x: np.ndarray, step: int) -> np.ndarray:
        u = self.directions(step)
        D = np.empty((self.K, self.d), dtype=np.float32)
        D[0::3] = perturb(x, u, self.h)
        D[1::3] = perturb(x, u, -self.h)
        D[2::3] = x
        return D

    def estimate(self, x: np.ndarray, step: int, D: np.ndarray,
                 L: np.ndarray) -> tuple[np.ndarray, float]:
        u = self.directions(step)
        ls = [float(v) for v in L]
        two_h = 2.0 * self.h
        coef = [(ls[3 * i] - ls[3 * i + 1]) / two_h for i in range(self.n)]
        g = weighted_direction_sum(u, coef).astype(np.float32)
        base = seq_sum([ls[3 * i + 2] for i in range(self.n)]) / self.n
        return g, base


class FzooEstimator(_Base):
    """FZOO: row 0 = x, rows 1..n = ``x + h u_i`` (Rademacher); one-sided, sigma-normalised.

    ``g = (1/n) sum_i u_i (L_i - L_0) / h / max(sigma/h, 1e-8)``, sigma = population std of
    ``L_1..L_n``; base loss = ``L_0``.
    """

    name = "fzoo"

    @property
    def K(self) -> int:  # noqa: N802 - spec name
        return self.n + 1

    def propose(self, x: np.ndarray, step: int) -> np.ndarray:
        u = self.directions(step)
        D = np.empty((self.K, self.d), dtype=np.float32)
        D[0] = x
        D[1:] = perturb(x, u, self.h)
        return D

    def estimate(self, x: np.ndarray, step: int, D: np.ndarray,
                 L: np.ndarray) -> tuple[np.ndarray, float]:
        u = self.directions(step)
        ls = [float(v) for v in L]
        coef = [(ls[i + 1] - ls[0]) / self.h for i in range(self.n)]
        acc = weighted_direction_sum(u, coef)
        return fzoo_normalise(acc, self.n, ls[1:], self.h), ls[0]


class AntitheticEstimator(_Base):
    """Antithetic pairs: rows ``2i = x + h u_i``, ``2i+1 = x - h u_i`` (Rademacher).

    ``g = (1/n) sum_i u_i (L+_i - L-_i) / (2h)``, normalised like FZOO with sigma over all 2n
    losses; base loss = mean of the 2n losses.
    """

    name = "antithetic"

    @property
    def K(self) -> int:  # noqa: N802 - spec name
        return 2 * self.n

    def propose(self, x: np.ndarray, step: int) -> np.ndarray:
        u = self.directions(step)
        D = np.empty((self.K, self.d), dtype=np.float32)
        D[0::2] = perturb(x, u, self.h)
        D[1::2] = perturb(x, u, -self.h)
        return D

    def estimate(self, x: np.ndarray, step: int, D: np.ndarray,
                 L: np.ndarray) -> tuple[np.ndarray, float]:
        u = self.directions(step)
        ls = [float(v) for v in L]
        two_h = 2.0 * self.h
        coef = [(ls[2 * i] - ls[2 * i + 1]) / two_h for i in range(self.n)]
        acc = weighted_direction_sum(u, coef)
        return fzoo_normalise(acc, self.n, ls, self.h), seq_sum(ls) / len(ls)


class GradientScaledFzoo(FzooEstimator):
    """FZOO's rows on coordinate directions, each step sized by the whole gradient (spec §2).

    With coordinate directions row i measures one partial derivative exactly, the slope
    ``T[p_i] = (L_i - L_0) / (h * u_i[p_i])`` of its coordinate ``p_i``. FZOO's spread rule would
    size each step's block by its own slopes, so a block that hardly matters moves as far as one
    that does. Here a table keeps every coordinate's latest slope (float64, zeroed per run) and
    ``‖ĝ‖ = sqrt(d / seen) * sqrt(Σ_j T[j]²)`` (sum left to right; ``seen`` = coordinates measured
    so far) estimates the whole gradient's norm; the step moves only this step's coordinates:
    ``g[p_i] = f32(T[p_i] * (sqrt(d) / ‖ĝ‖))``, 0 elsewhere, all zero while ``‖ĝ‖ = 0``. Over a
    cycle of d / n steps the blocks add up to one normalised-gradient step of length ``lr·√d``.
    Base loss = ``L_0``.
    """

    def __init__(self, n_dirs: int, h: float, seed: int, d: int,
                 directions: str = "coordinates") -> None:
        super().__init__(n_dirs, h, seed, d, directions)
        self.table = np.zeros(d, dtype=np.float64)
        self.seen = np.zeros(d, dtype=bool)

    def record(self, step: int, L: np.ndarray) -> tuple[list[int], float]:
        """Write this step's slopes into the table; return each row's coordinate and ``L_0``."""
        u = self.directions(step)
        ls = [float(v) for v in L]
        coords = [int(np.flatnonzero(u[i])[0]) for i in range(self.n)]  # one nonzero per row
        for i, p in enumerate(coords):
            self.table[p] = (ls[i + 1] - ls[0]) / (self.h * float(u[i, p]))
            self.seen[p] = True
        return coords, ls[0]

    def estimate(self, x: np.ndarray, step: int, D: np.ndarray,
                 L: np.ndarray) -> tuple[np.ndarray, float]:
        coords, base = self.record(step, L)
        g = np.zeros(self.d, dtype=np.float32)
        norm = math.sqrt(seq_sum((self.table * self.table).tolist()))
        if not norm > 0.0:
            return g, base
        scale = math.sqrt(self.d) / (math.sqrt(self.d / int(self.seen.sum())) * norm)
        for p in coords:
            g[p] = np.float32(self.table[p] * scale)
        return g, base


def rows_per_step(estimator: str, n_dirs: int) -> int:
    """Return K, the forward batch size, of ``estimator`` with ``n_dirs`` directions."""
    return {"paper": 3 * n_dirs, "fzoo": n_dirs + 1, "antithetic": 2 * n_dirs}[estimator]


def distinct_rows_per_step(estimator: str, n_dirs: int) -> int:
    """How many of a step's K rows are distinct points by construction: ``paper`` evaluates x
    itself n times (2n + 1 distinct), ``fzoo`` (n + 1) and ``antithetic`` (2n) none twice.
    Rows that coincide only by float32 rounding (x ± h·u equal to x or to another row in every
    coordinate) are not merged: the count is the estimator's, not a comparison of the rows."""
    return {"paper": 2 * n_dirs + 1, "fzoo": n_dirs + 1, "antithetic": 2 * n_dirs}[estimator]


def make_estimator(name: str, n_dirs: int, h: float, seed: int, d: int,
                   directions: str = "iid", normalise: str = "spread") -> Estimator:
    """Build the estimator called ``name``, drawing its own i.i.d. kind of directions
    (``directions="iid"``: Gaussian for ``paper``, Rademacher otherwise) or coordinate
    directions (``"coordinates"``: :func:`mobiedit.zo.rng.coordinates`); ``normalise="gradient"``
    (FZOO on coordinates only) builds :class:`GradientScaledFzoo`.

    Raises:
        ConfigError: for an unknown name, or ``normalise="gradient"`` off FZOO on coordinates.
        MobiEditError: for ``d < 1``.
    """
    classes: dict[str, Callable[..., Estimator]] = {
        "paper": PaperEstimator, "fzoo": FzooEstimator, "antithetic": AntitheticEstimator}
    if name not in classes:
        raise ConfigError(f"unknown estimator {name!r}", where="estimator",
                          fix=f"use one of {', '.join(ESTIMATORS)}")
    if directions not in DIRECTIONS:
        raise ConfigError(f"unknown directions {directions!r}", where="directions",
                          fix=f"use one of {', '.join(DIRECTIONS)}")
    check_normalise(normalise, name, directions)
    if d < 1:
        raise MobiEditError(f"delta length d={d} must be >= 1", where="x0",
                            fix="pass a non-empty 1-D float32 x0")
    if normalise == "gradient":
        return GradientScaledFzoo(n_dirs, h, seed, d, directions)
    return classes[name](n_dirs, h, seed, d, directions)


def check_normalise(normalise: str, estimator: str, directions: str, where: str = "normalise") -> None:
    """Raise :class:`ConfigError` (``where``) unless ``normalise`` is one of :data:`NORMALISE`
    and, for ``"gradient"``, the estimator is ``fzoo`` on coordinate directions (the only rows
    that measure single slopes). The one rule :class:`~mobiedit.zo.config.ZOConfig` applies too."""
    if normalise not in NORMALISE:
        raise ConfigError(f"unknown value {normalise!r}", where=where, fix=f"use one of {', '.join(NORMALISE)}")
    if normalise == "gradient" and (estimator, directions) != ("fzoo", "coordinates"):
        raise ConfigError(f"'gradient' needs estimator 'fzoo' on directions 'coordinates' "
                          f"(got {estimator!r} on {directions!r})", where=where,
                          fix="set estimator='fzoo' and directions='coordinates', or normalise='spread'")
