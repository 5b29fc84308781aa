"""Issue-18 probe: coordinate directions with a memory of every coordinate's last slope.

The information bound (docs/results.md, "It is the estimate, not Adam") says a forward-only search
recovers the gradient's direction only as fast as its directions cover the d coordinates; the
shipped optimizers forget what they learnt of a coordinate within ~10 steps (Adam's and momentum's
decay), so a delta built over ~d evaluations never holds more than a few dozen steps' worth of the
direction. This probe keeps it: with coordinate directions (``zo.directions="coordinates"``) each
step's K − 1 perturbed rows measure K − 1 partial derivatives exactly (forward differences at the
current delta, ``(L_i − L_0) / (h·s_i·√d)``); a table keeps the latest slope of every coordinate
(SAG-style: a stale entry stays until its coordinate comes round again in the next cycle), and the
step is normalised gradient descent along the table — ``g = √d·√f·G / ‖G‖`` with ``f`` the share of
coordinates seen so far (the table's norm over ``√f`` estimates the whole gradient's norm, so early
steps, which know only part of the direction, are short) — to be run with ``zo.optimizer="sgd"``,
``zo.momentum=0``: ``x -= lr·g``, the form of the exact-gradient probe's ``z -= lr·√d·g/‖g‖``.

Patches ``mobiedit.zo.loop.make_estimator`` so every Python-backend FZOO run with coordinate
directions uses the table (native rows, and i.i.d. rows, are untouched), then runs
``tools/delta_compare.py`` with the arguments given::

    python tools/probes/memory_directions.py --model smollm2-135m \\
        --requests mobiedit/data/known/smollm2-135m.json --n 4 --row rome=rome-lean --row fzoo=fzoo-stopw \\
        --row 'mem05=fzoo-stopw:backend="python";zo.directions="coordinates";zo.optimizer="sgd";zo.momentum=0;zo.lr=0.5' \\
        --out results/probes/memory_smollm2.json

``MEMORY_BLOCK=1`` (since session 26 the product's ``zo.normalise="gradient"``,
:class:`mobiedit.zo.estimators.GradientScaledFzoo`, which this mode now runs) steps along this
step's own K − 1 slopes only (coordinate descent), scaled by the
whole gradient's norm as the table estimates it (``√(d / seen)·‖G‖``) instead of FZOO's per-step
spread of the losses — which sizes a block of slopes that hardly matter like one that does; over a
cycle the steps add up to about one normalised-gradient step of length ``lr·√d`` per d / (K − 1) steps.

``MEMORY_WARM=1`` holds the delta at its start until the table is full (the first cycle of d / (K − 1)
steps only measures), so every step follows a whole, if stale, gradient.

A probe script (it patches the estimator), not a product path.
"""
import math
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from mobiedit.zo import loop as zo_loop  # noqa: E402
from mobiedit.zo.estimators import GradientScaledFzoo  # noqa: E402

_orig_make = zo_loop.make_estimator
#: ``MEMORY_WARM=1``: no step until the table holds every coordinate (the first cycle only measures)
WARM = os.environ.get("MEMORY_WARM", "0") == "1"
#: ``MEMORY_BLOCK=1``: step along this step's slopes only; the table gives only the scale
BLOCK = os.environ.get("MEMORY_BLOCK", "0") == "1"
#: what ``patch_site/sitecustomize.py`` adds to a bench row log's identity
TAG = f"tools/probes/memory_directions.py MEMORY_BLOCK={int(BLOCK)} MEMORY_WARM={int(WARM)}"


class MemoryEstimator(GradientScaledFzoo):
    """The product's slope table (:meth:`GradientScaledFzoo.record`); block mode is the product's
    step, the table and warm modes step along the normalised table."""

    def estimate(self, x, step, D, L):
        if BLOCK:
            return super().estimate(x, step, D, L)
        _, base = self.record(step, L)
        norm = float(np.linalg.norm(self.table))
        if not norm > 0.0:
            return np.zeros(self.d, dtype=np.float32), base
        seen = float(self.seen.sum())
        if WARM and seen < self.d:
            return np.zeros(self.d, dtype=np.float32), base
        frac = seen / self.d  # the recorded figures were made with this order of operations
        return (self.table * (math.sqrt(self.d * frac) / norm)).astype(np.float32), base


def make_estimator(name, n_dirs, h, seed, d, directions="iid", normalise="spread"):
    if name == "fzoo" and directions == "coordinates" and normalise == "spread" and n_dirs <= d:
        return MemoryEstimator(n_dirs, h, seed, d, directions)
    return _orig_make(name, n_dirs, h, seed, d, directions, normalise)


if __name__ == "__main__":
    zo_loop.make_estimator = make_estimator
    from tools.delta_compare import main
    main()
