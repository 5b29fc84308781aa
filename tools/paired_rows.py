"""Bench row logs read on the requests they all share (a like-for-like table of rows that were run
to different lengths or in different runs)::

    python tools/paired_rows.py results/bench_smollm2/row-rome-lean-L5.jsonl \\
        results/diag_smollm2_depth/row-rome-lean-dadf83d1-L5.jsonl results/bench_smollm2/row-fzoo-stopw-L5.jsonl

Per log: efficacy / generalization (token accuracy, then P(new) > P(true)), locality unchanged vs
the unedited model, success on the edited model, median loss evaluations, the median written
loss (the edited model's objective at the rewrite rows), mean s/edit, and — where every log measured
general ability on every shared request (a bench run without ``--no-ability``) — the held-out
perplexity change (``mobiedit.evaluate.perplexity_change_pct``) and the fluency (n-gram entropy,
bits) before and after; NaN otherwise. All over the common requests.
Then, for the last log against each other, on how many requests its generalization (both
conventions) and locality are higher / lower. ``--json F`` writes the table, the shared case ids
and every log's per-request scores; ``--png F`` a bar chart of the quality columns.
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from mobiedit.atomic import atomic_write_text, save_png
from mobiedit.evaluate import perplexity_change_pct

#: the quality columns: (table name, score key)
QUALITY = (("eff", "efficacy_acc"), ("gen", "generalization_acc"), ("effP", "efficacy_prob"),
           ("genP", "generalization_prob"), ("locU", "locality_unchanged"))


COLUMNS = (*(col for col, _ in QUALITY), "succ%", "evals(med)", "written loss(med)", "s/edit", "ppl%", "flu pre",
           "flu post")
NAN = float("nan")


def ability(rs: list[dict]) -> dict[str, float]:
    """``ppl%``, ``flu pre``, ``flu post`` of the records ``rs``: NaN unless each one measured them."""
    sc = [r["scores"] for r in rs]
    keys = ("perplexity_pre", "perplexity", "fluency_pre", "fluency")
    if not sc or any(not (s.get(k, NAN) == s.get(k, NAN)) for s in sc for k in keys):
        return {"ppl%": NAN, "flu pre": NAN, "flu post": NAN}
    return {"ppl%": perplexity_change_pct([(s["perplexity_pre"], s["perplexity"]) for s in sc]),
            "flu pre": statistics.mean(s["fluency_pre"] for s in sc),
            "flu post": statistics.mean(s["fluency"] for s in sc)}


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
        out[name] = {**{col: pct(key) for col, key in QUALITY},
                     "succ%": 100.0 * statistics.mean(bool(r["succeeded"]) for r in rs),
                     "evals(med)": statistics.median(r["loss_evals"] for r in rs),
                     "written loss(med)": statistics.median(written) if written else float("nan"),
                     "s/edit": statistics.mean(r["wall_s"] for r in rs), **ability(rs)}
    return common, out


def wins(a: dict[str, dict], b: dict[str, dict], common: list[str], key: str) -> tuple[int, int]:
    """(requests where ``a``'s score ``key`` is above ``b``'s, requests where it is below)."""
    d = [a[c]["scores"][key] - b[c]["scores"][key] for c in common]
    return sum(x > 1e-12 for x in d), sum(x < -1e-12 for x in d)


def plot(table: dict[str, dict], n: int, png: Path) -> None:
    """Grouped bars: each log's quality columns (%), evaluations in the legend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(table)
    fig, ax = plt.subplots(figsize=(8, 4.2 + 0.25 * len(names)))
    w = 0.8 / len(names)
    for i, name in enumerate(names):
        vals = [table[name][c] for c, _ in QUALITY]
        xs = [j + (i - (len(names) - 1) / 2) * w for j in range(len(QUALITY))]
        ax.bar(xs, vals, w, label=f"{name} — evals(med) {table[name]['evals(med)']:.0f}")
        for x, v in zip(xs, vals):
            ax.text(x, v + 1, f"{v:.0f}", ha="center", fontsize=7)
    ax.set_xticks(range(len(QUALITY)), [c for c, _ in QUALITY])
    ax.set_ylim(0, 112)
    ax.set_ylabel("% of the shared requests' prompts")
    ax.set_title(f"{n} requests shared by {len(names)} row logs", fontsize=9)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.08), frameon=False)
    ax.grid(alpha=0.3, axis="y")
    save_png(fig, png)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("logs", type=Path, nargs="+", help="row-*.jsonl files")
    ap.add_argument("--json", type=Path, help="write the table, the shared case ids and per-request scores here")
    ap.add_argument("--png", type=Path, help="write a bar chart of the quality columns here")
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
        print(f"{name:<{width}}" + "".join(f"{row[c]:>18.3f}" if "loss" in c or c[:3] in ("ppl", "flu") else f"{row[c]:>18.1f}" for c in COLUMNS))
    last = list(logs)[-1]
    for other in list(logs)[:-1]:
        counts = {k: wins(logs[last], logs[other], common, key) for k, key in QUALITY if k in ("gen", "genP", "locU")}
        print(f"{last} vs {other}: " + ", ".join(f"{k} higher on {u} / lower on {d}" for k, (u, d) in counts.items()))
    if a.json:
        atomic_write_text(a.json, json.dumps({"logs": [str(p) for p in a.logs], "case_ids": common, "table": table,
                                              "scores": {name: {c: recs[c]["scores"] for c in common}
                                                         for name, recs in logs.items()}}, indent=1))
    if a.png:
        plot(table, len(common), a.png)


if __name__ == "__main__":
    main()
