"""Issue-18 probe: ZO directions orthogonal across steps instead of i.i.d. Rademacher. For a fixed
gradient, the accumulated estimate of N directions is then a projection (cos² = N/d) instead of
carrying cross-noise (cos² ≈ N/(N+d)). Two kinds (``--kind``, before the other arguments):

* ``rotation``: each cycle of d/K steps draws its K-row blocks from one random rotation (QR of a
  seeded Gaussian matrix; rows √d long);
* ``coordinates``: signed coordinate vectors √d·e_j, a seeded permutation of the d coordinates per
  cycle — the same idea in the form an engine can reproduce exactly.

Patches ``mobiedit.zo.rng.directions`` for the Python backend only (rows with
``backend="python"``; native rows keep i.i.d. Rademacher), then runs ``tools/delta_compare.py``
with the remaining arguments::

    python tools/probes/orthogonal_directions.py --kind rotation --model smollm2-135m \\
        --requests mobiedit/data/known/smollm2-135m.json --n 4 --row rome=rome-lean \\
        --row 'isgd05=fzoo-stopw:zo.optimizer="sgd";zo.lr=0.5' \\
        --row 'osgd05=fzoo-stopw:backend="python";zo.optimizer="sgd";zo.lr=0.5' \\
        --row 'osgd1=fzoo-stopw:backend="python";zo.optimizer="sgd";zo.lr=1.0' --out runs/orth_smol2.json
    python tools/probes/orthogonal_directions.py --kind coordinates --model smollm2-135m \\
        --requests mobiedit/data/known/smollm2-135m.json --n 4 --row rome=rome-lean \\
        --row 'csgd05=fzoo-stopw:backend="python";zo.optimizer="sgd";zo.lr=0.5' --out runs/coord_smol2.json

A probe script (it patches the direction generator), not a product path. The product's form of
the ``coordinates`` kind is ``ZOConfig.directions = "coordinates"`` (session 24; a Philox draw both
backends share, docs/zo_spec.md §1), which replaces this patch for new measurements; this script
stays to reproduce the session-23 figures.
"""
import functools
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from mobiedit.zo import rng  # noqa: E402

_orig = rng.directions


@functools.lru_cache(maxsize=4)
def _rot(seed, cycle, d):
    g = np.random.default_rng([seed, cycle, 7919]).standard_normal((d, d))
    q, r = np.linalg.qr(g)
    q = q * np.sign(np.diag(r))[None, :]
    return (q.T * np.sqrt(d)).astype(np.float32)  # rows orthogonal, norm sqrt(d)


def rotation(seed, step, n, d):
    """Rows ``j·n … (j+1)·n`` of cycle ``step // (d // n)``'s rotation."""
    cyc, j = divmod(step, d // n)
    return _rot(seed, cyc, d)[j * n:(j + 1) * n].copy()


@functools.lru_cache(maxsize=8)
def _perm(seed, cycle, d):
    g = np.random.default_rng([seed, cycle, 104729])
    return g.permutation(d), g.choice([-1.0, 1.0], size=d)


def coordinates(seed, step, n, d):
    """Signed coordinate directions, √d long, a fresh permutation per cycle of d coordinates."""
    out = np.zeros((n, d), dtype=np.float32)
    for i in range(n):
        cyc, j = divmod(step * n + i, d)
        perm, sign = _perm(seed, cyc, d)
        out[i, perm[j]] = sign[j] * np.sqrt(d)
    return out


def patched(kind_fn):
    def directions(kind, seed, step, n, d, stream=rng.STREAM_DIRECTIONS):
        if kind != "rademacher" or stream != rng.STREAM_DIRECTIONS or n > d:
            return _orig(kind, seed, step, n, d, stream)
        return kind_fn(seed, step, n, d)
    return directions


if __name__ == "__main__":
    if len(sys.argv) < 3 or sys.argv[1] != "--kind" or sys.argv[2] not in ("rotation", "coordinates"):
        sys.exit("usage: orthogonal_directions.py --kind rotation|coordinates DELTA_COMPARE_ARGS...")
    rng.directions = patched({"rotation": rotation, "coordinates": coordinates}[sys.argv[2]])
    del sys.argv[1:3]
    from tools.delta_compare import main
    main()
