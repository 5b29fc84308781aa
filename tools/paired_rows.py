"""Bench row logs read on the requests they all share (a like-for-like table of rows that were run
to different lengths or in different runs)::

    python tools/paired_rows.py results/bench_smollm2/row-rome-lean-L5.jsonl \\
        results/diag_smollm2_depth/row-rome-lean-dadf83d1-L5.jsonl results/bench_smollm2/row-fzoo-stopw-L5.jsonl

Per log: efficacy / generalization (token accuracy, then P(new) > P(true)), locality unchanged vs
the unedited model, success on the edited model, median loss evaluations, the median written
loss (the edited model's objective at the rewrite rows) and mean s/edit — over the common requests.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

COLUMNS = ("eff", "gen", "effP", "genP", "locU", "succ%", "evals(med)", "written loss(med)", "s/edit")


def read_log(path: Path) -> tuple[dict, dict[str, dict]]:
    """(identity, {case_id: record}) of a row log (line 0: the row's identity)."""
    from tools.compare_rows import records

    with path.open() as f:
        identity = json.loads(f.readline()).get("identity", {})
    return identity, records(path)


def paired(logs: dict[str, dict[str, dict]]) -> tuple[list[str], dict[str, dict]]:
    """The shared case ids (sorted) and per log the figures of :data:`COLUMNS` over them."""
    common = sorted(set.intersection(*(set(v) for v in logs.values())))
    out = {}
    for name, recs in logs.items():
        rs = [recs[c] for c in common]

        def pct(key: str) -> float:
            return 100.0 * statistics.mean(r["scores"][key] for r in rs)

        written = [r["write"]["loss"] for r in rs if r.get("write")]
        out[name] = {"eff": pct("efficacy_acc"), "gen": pct("generalization_acc"), "effP": pct("efficacy_prob"),
                     "genP": pct("generalization_prob"), "locU": pct("locality_unchanged"),
                     "succ%": 100.0 * statistics.mean(bool(r["succeeded"]) for r in rs),
                     "evals(med)": statistics.median(r["loss_evals"] for r in rs),
                     "written loss(med)": statistics.median(written) if written else float("nan"),
                     "s/edit": statistics.mean(r["wall_s"] for r in rs)}
    return common, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", type=Path, nargs="+", help="row-*.jsonl files")
    a = ap.parse_args()
    logs = {}
    for p in a.logs:
        ident, recs = read_log(p)
        sets = ident.get("row", p.stem)
        logs[f"{p.parent.name}/{p.stem} ({sets})"] = recs
    common, table = paired(logs)
    if not common:
        raise SystemExit("the logs share no request")
    print(f"{len(common)} requests shared by {len(logs)} logs")
    width = max(len(k) for k in table)
    print(f"{'log':<{width}}" + "".join(f"{c:>18}" for c in COLUMNS))
    for name, row in table.items():
        print(f"{name:<{width}}" + "".join(f"{row[c]:>18.3f}" if "loss" in c else f"{row[c]:>18.1f}" for c in COLUMNS))


if __name__ == "__main__":
    main()
