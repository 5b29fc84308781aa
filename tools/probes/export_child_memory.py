"""Peak RSS of the ``mobiedit-ort`` row's export child (:func:`mobiedit.bench_shape_ort.export_child`:
the shape's random model lowered to ``nbits`` prefix + edit programs) — what lowering costs in memory.

    python tools/probes/export_child_memory.py [--shape qwen2-0.5b] [--bits 4] [--model-dir DIR]

Builds the shape's random model (``bench_shape.build_random``, fixed seed) unless ``--model-dir``
holds one, runs the export child in its own process (one thread) and prints its peak RSS
(``ru_maxrss`` of the child) and wall time. Run it at two commits to compare lowerings.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", default="qwen2-0.5b")
    p.add_argument("--layer", type=int, default=5)
    p.add_argument("--bits", type=int, default=4)
    p.add_argument("--model-dir", help="a folder holding the shape's random model (built there if empty)")
    a = p.parse_args(argv)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with tempfile.TemporaryDirectory() as tmp:
        model = Path(a.model_dir) if a.model_dir else Path(tmp) / "model"
        if not (model / "config.json").exists():
            subprocess.run([sys.executable, "-c", "import sys; from pathlib import Path; "
                            "from mobiedit.bench_shape import build_random; build_random(sys.argv[1], Path(sys.argv[2]))",
                            a.shape, str(model)], check=True, env=env)
        code = ("import sys; from mobiedit.bench_shape_ort import export_child; "
                "export_child(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), 0, 1, sys.argv[4])")
        before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code, str(model), str(a.layer), str(a.bits), str(Path(tmp) / "programs")],
                       check=True, env=env)
        peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    if peak_kb <= before:
        print("the export child's peak was not above the model builder's; pass --model-dir", file=sys.stderr)
    print(json.dumps({"shape": a.shape, "bits": a.bits, "export_child_peak_rss_mb": round(peak_kb / 1024),
                      "wall_s": round(time.perf_counter() - t0, 1)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
