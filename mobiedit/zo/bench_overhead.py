"""Per-step loop overhead of the ZO search, native vs Python, excluding the forward itself.

The forward callback is trivial (returns precomputed losses) and the time spent inside it is
measured and subtracted, so the figure is what the loop itself costs per step: direction
generation, building D, the estimate, the update and (for native) the callback bridge.

Run: ``.venv/bin/python -m mobiedit.zo.bench_overhead [d] [K] [steps]`` (prints JSON).
"""
from __future__ import annotations

import json
import sys
import time
from typing import Any, Callable

import numpy as np

from mobiedit.errors import ConfigError
from mobiedit.zo import ZOConfig, run_zo


def _dirs_for_rows(estimator: str, K: int) -> int:
    """n_dirs giving exactly K rows per forward for ``estimator`` (ConfigError if impossible)."""
    n = {"fzoo": K - 1, "antithetic": K // 2, "paper": K // 3}[estimator]
    if n < 1 or ZOConfig(estimator=estimator, n_dirs=n).K != K:
        raise ConfigError(f"K={K} is not reachable with estimator {estimator!r}", where="K",
                          fix="fzoo: K >= 2; antithetic: even K; paper: K divisible by 3")
    return n


def _timed_forward(losses: np.ndarray) -> tuple[Callable[[np.ndarray], np.ndarray], list[float]]:
    """A forward returning ``losses`` and a one-element list accumulating time spent in it."""
    spent = [0.0]

    def forward(D: np.ndarray) -> np.ndarray:
        t0 = time.perf_counter()
        out = losses
        spent[0] += time.perf_counter() - t0
        return out

    return forward, spent


def _per_step(backend: str, cfg: ZOConfig, d: int, losses: np.ndarray, repeats: int) -> float:
    """Best-of-``repeats`` seconds per step of ``run_zo`` minus time inside the forward."""
    best = float("inf")
    for _ in range(repeats):
        forward, spent = _timed_forward(losses)
        t0 = time.perf_counter()
        res = run_zo(forward, None, np.zeros(d, np.float32), cfg, backend=backend)
        total = time.perf_counter() - t0
        best = min(best, (total - spent[0]) / res.steps)
    return best


def measure_overhead(d: int = 2048, K: int = 16, steps: int = 200, estimator: str = "fzoo",
                     optimizer: str = "adam", repeats: int = 3) -> dict[str, Any]:
    """Time per-step loop overhead (forward excluded) for both backends, single-threaded.

    Returns a dict with ``python_s_per_step``, ``native_s_per_step``, ``ratio`` (native /
    python; the target is <= 0.2), ``speedup`` (python / native) and the parameters.
    torch's intra-op thread count is set to 1 for the measurement and restored afterwards.
    """
    import torch

    n_dirs = _dirs_for_rows(estimator, K)
    cfg = ZOConfig(estimator=estimator, n_dirs=n_dirs, optimizer=optimizer, h=1e-3, lr=1e-3,
                   max_steps=steps, max_evals=K * steps, seed=1234)
    losses = np.random.default_rng(0).uniform(1.0, 2.0, size=K).astype(np.float32)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        py = _per_step("python", cfg, d, losses, repeats)
        nat = _per_step("native", cfg, d, losses, repeats)
    finally:
        torch.set_num_threads(threads)
    return {"d": d, "K": K, "steps": steps, "estimator": estimator, "optimizer": optimizer,
            "python_s_per_step": py, "native_s_per_step": nat, "ratio": nat / py,
            "speedup": py / nat}


def main(argv: list[str]) -> int:
    """CLI: ``bench_overhead [d] [K] [steps]``; writes the result as JSON to stdout."""
    d, K, steps = ([int(a) for a in argv[:3]] + [2048, 16, 200][len(argv[:3]):])
    result = measure_overhead(d=d, K=K, steps=steps)
    sys.stdout.write(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
