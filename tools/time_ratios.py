"""Seconds per edit of one bench run's rows as ratios against reference rows, request by request:
``python tools/time_ratios.py RUN_DIR --ref rome --ref rome-lean``.

Only rows measured in the same run are read (one ``bench --out`` folder: the rows ran side by side,
each a one-thread child), and only the requests every row finished. For each row: mean and median
s/edit, the ratio of its mean to each reference's mean and the median of the per-request ratios,
the median loss evaluations, seconds per evaluation and peak RSS. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import re
import statistics as st
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tools.compare_rows import records  # noqa: E402


def row_logs(run: Path) -> dict[str, dict[str, dict]]:
    """Row name (the log's file name without ``row-`` and the layer) -> case id -> record."""
    out = {}
    for p in sorted(run.glob("row-*.jsonl")):
        out[p.stem[len("row-"):].rsplit("-L", 1)[0]] = records(p)
    return out


def resolve_ref(rows: dict[str, dict[str, dict]], ref: str) -> str:
    """The row ``ref`` names: itself, or the one row of that name run with ``--set`` settings (its log
    name carries an 8-hex digest of them, ``rome-dadf83d1``)."""
    if ref in rows:
        return ref
    hits = [n for n in rows if re.fullmatch(re.escape(ref) + r"-[0-9a-f]{8}", n)]
    if len(hits) != 1:
        raise SystemExit(f"--ref {ref}: {'no such row' if not hits else 'more than one row'} in the run "
                         f"(rows: {', '.join(rows)})")
    return hits[0]


def ratio_table(rows: dict[str, dict[str, dict]], refs: list[str]) -> list[str]:
    """The Markdown lines of the table (see the module docstring)."""
    if not rows:
        raise SystemExit("no row logs (row-*.jsonl) in the run folder: pass a `mobiedit bench --out` folder")
    refs = [resolve_ref(rows, r) for r in refs]
    cases = sorted(set.intersection(*(set(r) for r in rows.values())))
    if not cases:
        raise SystemExit("the rows share no finished request")
    wall = {name: [recs[c]["wall_s"] for c in cases] for name, recs in rows.items()}
    head = ["row", "s/edit mean", "median"] + [f"÷ {r} (means; per-request median)" for r in refs] + \
           ["evals median", "s/eval median", "peak RSS MB"]
    lines = [f"{len(cases)} requests every row finished", "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for name, recs in rows.items():
        w = wall[name]
        cells = [name, f"{st.mean(w):.2f}", f"{st.median(w):.2f}"]
        for ref in refs:
            per = [a / b for a, b in zip(w, wall[ref])]
            cells.append(f"{st.mean(w) / st.mean(wall[ref]):.3f}; {st.median(per):.3f}")
        evals = [recs[c]["loss_evals"] for c in cases]
        cells += [f"{st.median(evals):g}", f"{st.median(x / e for x, e in zip(w, evals)):.3f}",
                  f"{max(recs[c]['peak_rss_mb'] for c in cases):.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run", type=Path, help="a `mobiedit bench --out` folder")
    ap.add_argument("--ref", action="append", required=True, help="a reference row (repeatable)")
    args = ap.parse_args()
    print("\n".join(ratio_table(row_logs(args.run), args.ref)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
