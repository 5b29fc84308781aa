"""Counter-based random numbers: Philox4x32-10, vectorised in numpy (spec §1).

Contract: every function here is a pure function of its arguments (no global RNG, no state), and
produces bit for bit the words that the native engine (``native/src/philox.cpp``) produces for
the same arguments. Rademacher signs are therefore bit-identical across backends; Gaussians are
computed in float64 with the same formula and rounded to float32 (bit-exact unless two libms
disagree by an ulp at a float32 rounding boundary; the parity tests allow 1e-6).

Counter layout for a perturbation element ``j`` of direction ``row`` at loop ``step``:
``(j // 4, row, step, stream)``; output word ``j % 4`` belongs to element ``j``.

Coordinate directions (kind ``"coordinates"``) are signed, scaled basis vectors ``√d·s·e_p``:
direction ``i`` of ``step`` is slot ``t = step·n + i`` of the sequence, which runs through cycles
of ``d`` slots; cycle ``c = t // d`` is a permutation ``p`` of the ``d`` coordinates with signs
``s``, drawn from the ``2d`` words of counters ``(b, c mod 2**32, c // 2**32, stream)``:
Fisher–Yates from the last slot down, slot ``k`` swapping with ``(w_k·(k+1)) >> 32`` (word ``k``),
and sign ``+1`` where word ``d + k``'s top bit is 0. Within a cycle the directions are
orthogonal and cover every coordinate once (their outer products sum to ``d·I``).
"""
from __future__ import annotations

import functools

import numpy as np
import numpy.typing as npt

from mobiedit.errors import ConfigError

PHILOX_M0 = 0xD2511F53
PHILOX_M1 = 0xCD9E8D57
PHILOX_W0 = 0x9E3779B9
PHILOX_W1 = 0xBB67AE85
PHILOX_ROUNDS = 10
STREAM_DIRECTIONS = 0

_MASK32 = 0xFFFFFFFF
_U32 = np.uint32
_U64 = np.uint64
_TWO_POW_M32 = 2.0**-32
_TWO_PI = 2.0 * np.pi

#: Output of ``philox4x32_10`` for counter (0,0,0,0), key (0,0) (Random123 known answer).
KNOWN_ANSWER = (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)

Words = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
Counter = tuple[npt.ArrayLike, npt.ArrayLike, npt.ArrayLike, npt.ArrayLike]


def seed_to_key(seed: int) -> tuple[int, int]:
    """Split a uint64 seed into the Philox key ``(seed & 0xFFFFFFFF, seed >> 32)``.

    Raises:
        ConfigError: if ``seed`` is not an int in [0, 2**64).
    """
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ConfigError(f"seed must be an int, got {type(seed).__name__}", where="seed",
                          fix="pass an integer in [0, 2**64)")
    seed = int(seed)
    if not 0 <= seed < 2**64:
        raise ConfigError(f"seed {seed} is outside [0, 2**64)", where="seed",
                          fix="pass an integer in [0, 2**64)")
    return seed & _MASK32, seed >> 32


def _mulhilo(m: int, a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Return (hi, lo) 32-bit halves of the 64-bit product ``m * a`` (element-wise)."""
    prod = a.astype(_U64) * _U64(m)
    return (prod >> _U64(32)).astype(_U32), (prod & _U64(_MASK32)).astype(_U32)


def philox4x32_10(counter: Counter, key: tuple[int, int]) -> Words:
    """Apply Philox4x32-10 to arrays of counters (broadcast together) under one key.

    Args:
        counter: four uint32-compatible arrays (c0, c1, c2, c3), broadcastable to one shape.
        key: (k0, k1), each in [0, 2**32).

    Returns:
        Four uint32 arrays of the broadcast shape: the output words x0..x3.
    """
    c0, c1, c2, c3 = (np.asarray(c, dtype=_U32) for c in np.broadcast_arrays(*counter))
    k0, k1 = int(key[0]) & _MASK32, int(key[1]) & _MASK32
    for rnd in range(PHILOX_ROUNDS):
        if rnd > 0:
            k0 = (k0 + PHILOX_W0) & _MASK32
            k1 = (k1 + PHILOX_W1) & _MASK32
        hi0, lo0 = _mulhilo(PHILOX_M0, c0)
        hi1, lo1 = _mulhilo(PHILOX_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ _U32(k0), lo1, hi0 ^ c3 ^ _U32(k1), lo0
    return c0, c1, c2, c3


def _words(seed: int, step: int, n: int, d: int, stream: int) -> np.ndarray:
    """Return the uint32 words for ``n`` rows of ``d`` elements as an array ``[n, d]``."""
    if n < 0 or d < 0 or step < 0 or stream < 0:
        raise ConfigError(f"negative argument (n={n}, d={d}, step={step}, stream={stream})",
                          where="directions", fix="pass non-negative sizes and indices")
    blocks = (d + 3) // 4
    b = np.arange(blocks, dtype=_U32)[None, :]
    r = np.arange(n, dtype=_U32)[:, None]
    x0, x1, x2, x3 = philox4x32_10((b, r, _U32(step & _MASK32), _U32(stream & _MASK32)),
                                   seed_to_key(seed))
    out = np.stack((x0, x1, x2, x3), axis=-1).reshape(n, blocks * 4)
    return out[:, :d]


def uniform_from_words(words: np.ndarray) -> np.ndarray:
    """Map uint32 words to float64 uniforms in (0, 1): ``(w + 0.5) * 2**-32``."""
    return (words.astype(np.float64) + 0.5) * _TWO_POW_M32


def rademacher(seed: int, step: int, n: int, d: int, stream: int = STREAM_DIRECTIONS) -> np.ndarray:
    """Return ``n`` Rademacher directions ``[n, d]`` float32: +1 where the word's top bit is 0."""
    top = _words(seed, step, n, d, stream) >> _U32(31)
    return (1.0 - 2.0 * top.astype(np.float32)).astype(np.float32)


def gaussian(seed: int, step: int, n: int, d: int, stream: int = STREAM_DIRECTIONS) -> np.ndarray:
    """Return ``n`` standard-normal directions ``[n, d]`` float32 by Box–Muller on word pairs.

    Words (w0, w1) of a block give elements 4b+0 (cos) and 4b+1 (sin); (w2, w3) give 4b+2, 4b+3.
    """
    blocks = (d + 3) // 4
    w = _words(seed, step, n, blocks * 4, stream).reshape(n, blocks, 2, 2)
    u_even = uniform_from_words(w[..., 0])
    u_odd = uniform_from_words(w[..., 1])
    r = np.sqrt(-2.0 * np.log(u_even))
    th = _TWO_PI * u_odd
    z = np.stack((r * np.cos(th), r * np.sin(th)), axis=-1).reshape(n, blocks * 4)
    return z[:, :d].astype(np.float32)


@functools.lru_cache(maxsize=4)
def coordinate_cycle(seed: int, cycle: int, d: int,
                     stream: int = STREAM_DIRECTIONS) -> tuple[np.ndarray, np.ndarray]:
    """Return cycle ``cycle``'s permutation (int64 ``[d]``) and signs (float32 ``[d]``) — the
    module docstring's draw. Read-only arrays (cached)."""
    if d < 1 or cycle < 0 or stream < 0:
        raise ConfigError(f"bad cycle arguments (d={d}, cycle={cycle}, stream={stream})",
                          where="coordinate_cycle", fix="pass d >= 1 and a non-negative cycle")
    blocks = (2 * d + 3) // 4
    b = np.arange(blocks, dtype=_U32)
    x = philox4x32_10((b, _U32(cycle & _MASK32), _U32((cycle >> 32) & _MASK32),
                       _U32(stream & _MASK32)), seed_to_key(seed))
    w = np.stack(x, axis=-1).reshape(blocks * 4)[:2 * d]
    draw = ((w[:d].astype(_U64) * np.arange(1, d + 1, dtype=_U64)) >> _U64(32)).tolist()
    perm = list(range(d))
    for k in range(d - 1, 0, -1):
        r = draw[k]
        perm[k], perm[r] = perm[r], perm[k]
    sign = (1.0 - 2.0 * (w[d:] >> _U32(31)).astype(np.float32)).astype(np.float32)
    p = np.asarray(perm, dtype=np.int64)
    p.flags.writeable = False
    sign.flags.writeable = False
    return p, sign


def coordinates(seed: int, step: int, n: int, d: int, stream: int = STREAM_DIRECTIONS) -> np.ndarray:
    """Return ``n`` coordinate directions ``[n, d]`` float32 (slots ``step·n … step·n + n − 1``
    of the module docstring's sequence); each row has one nonzero, ``±float32(√d)``."""
    if n < 0 or d < 1 or step < 0:
        raise ConfigError(f"bad argument (n={n}, d={d}, step={step})", where="directions",
                          fix="pass n >= 0, d >= 1 and a non-negative step")
    out = np.zeros((n, d), dtype=np.float32)
    scale = np.float32(np.sqrt(np.float64(d)))
    for i in range(n):
        cycle, j = divmod(step * n + i, d)
        perm, sign = coordinate_cycle(seed, cycle, d, stream)
        out[i, perm[j]] = sign[j] * scale
    return out


#: Direction kinds :func:`directions` draws.
KINDS = ("rademacher", "gaussian", "coordinates")


def directions(kind: str, seed: int, step: int, n: int, d: int,
               stream: int = STREAM_DIRECTIONS) -> np.ndarray:
    """Dispatch to :func:`rademacher`, :func:`gaussian` or :func:`coordinates` by ``kind``.

    Raises:
        ConfigError: for an unknown ``kind``.
    """
    if kind == "rademacher":
        return rademacher(seed, step, n, d, stream)
    if kind == "gaussian":
        return gaussian(seed, step, n, d, stream)
    if kind == "coordinates":
        return coordinates(seed, step, n, d, stream)
    raise ConfigError(f"unknown direction kind {kind!r}", where="kind",
                      fix=f"use one of {', '.join(KINDS)}")
