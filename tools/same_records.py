"""Do two bench row logs hold the same edits? Per shared request: evaluations, stop status,
success, the written-edit check and every (non-NaN) score compared exactly — e.g. a product row
against the probe it replaces::

    python tools/same_records.py results/probe_smollm2_block/row-fzoo-stopw-ba142c4b-L5.jsonl \\
        results/bench_smollm2/row-fzoo-grad-L5.jsonl

Prints the count of identical and differing requests (and the differing case ids); exit 1 when any
differ. Wall time, RSS and process ids are not compared (they depend on the box).
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.compare_rows import records  # noqa: E402

KEYS = ("loss_evals", "status", "succeeded", "write", "scores")


def edit_of(rec: dict) -> tuple:
    """What a record says about the edit (NaN scores dropped: NaN != NaN)."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if not (isinstance(x, float) and math.isnan(x))}
        return v
    return tuple(clean(rec.get(k)) for k in KEYS)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("a", type=Path)
    ap.add_argument("b", type=Path)
    args = ap.parse_args()
    a, b = records(args.a), records(args.b)
    shared = sorted(set(a) & set(b))
    differ = [c for c in shared if edit_of(a[c]) != edit_of(b[c])]
    print(f"{len(shared)} shared requests: {len(shared) - len(differ)} identical, {len(differ)} differ")
    for c in differ:
        print("  differs:", c)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
