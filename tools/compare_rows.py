"""Compare two bench runs request by request: ``python tools/compare_rows.py BEFORE_DIR AFTER_DIR``.

For each ``row-*.jsonl`` present in both folders: how many requests carry identical scores,
verdicts and evaluation counts, and the rows' summaries side by side (quality, success, median
loss evaluations, s/edit, peak RSS). A refactor that must not change the arithmetic shows
``identical N/N``; s/edit is only comparable when both runs ran side by side.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

SAME = ("scores", "succeeded", "loop_succeeded", "status", "loss_evals", "distinct_evals", "sequences",
        "forward_calls", "backward_calls", "write")


def records(path: Path) -> dict[str, dict]:
    out = {}
    for line in path.read_text().splitlines()[1:]:  # line 0: the row's identity
        rec = json.loads(line)
        out[rec["case_id"]] = rec
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before", type=Path)
    ap.add_argument("after", type=Path)
    a = ap.parse_args()
    for log in sorted(a.before.glob("row-*.jsonl")):
        other = a.after / log.name
        if not other.is_file():
            continue
        b, c = records(log), records(other)
        common = sorted(set(b) & set(c))
        same = [k for k in common if all(b[k].get(f) == c[k].get(f) for f in SAME)]
        diff = {f for k in common for f in SAME if b[k].get(f) != c[k].get(f)}
        print(f"{log.stem}: identical {len(same)}/{len(common)} requests" + (f" (differ in {sorted(diff)})" if diff else ""))
        ratios = sorted(c[k]["wall_s"] / b[k]["wall_s"] for k in common if b[k].get("wall_s"))
        if ratios:
            q = lambda f: ratios[min(len(ratios) - 1, int(f * len(ratios)))]  # noqa: E731
            print(f"  wall after/before per request: median {q(0.5):.3f} (quartiles {q(0.25):.3f}-{q(0.75):.3f}), "
                  f"after faster on {sum(r < 1 for r in ratios)}/{len(ratios)}")
        for tag, d in (("before", a.before), ("after", a.after)):
            summary = d / log.name.replace(".jsonl", ".json")
            if not summary.is_file():
                print(f"  {tag:6} (row not finished: no {summary.name})")
                continue
            s = json.loads(summary.read_text())
            q = s["quality"]
            print(f"  {tag:6} eff {q['efficacy_acc']:.2f} gen {q['generalization_acc']:.2f} loc {q['locality_acc']:.2f} "
                  f"locU {q['locality_unchanged']:.2f} ppl {q['perplexity_change_pct']:+.3f}% succ {s['success_rate']:.1f} "
                  f"loop {s['loop_success_rate']:.1f} agree {s['verdict_agreement']:.1f} "
                  f"evals median {s['loss_evals_median_success']:.0f} mean {s['loss_evals_mean']:.1f} "
                  f"s/edit {s['wall_per_edit_s']:.3f} peak RSS {s['peak_rss_mb']:.0f} MB")


if __name__ == "__main__":
    main()
