"""One figure of several ``mobiedit bench-bundle-sequential`` runs (e.g. one bundle under different
write rules, run side by side)::

    python tools/plot_bundle_sequential.py results/bundle_seq_protect/bundle_sequential_{rome,protect}.json \\
        --labels rome protect --out results/bundle_seq_protect/rules.png

One panel per checkpoint metric (the bench's table, edits 0 = the unedited bundle), one line per run.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mobiedit.atomic import save_png  # noqa: E402

#: (table key, panel title)
PANELS = (("applied", "edits applied"), ("efficacy_exact", "new facts said whole (%)"),
          ("retention_applied_acc", "applied edits retained (token acc, %)"),
          ("generalization_acc", "generalization (%)"), ("locality_acc", "neighbours unchanged (%)"),
          ("probe_locality_acc", "never-edited facts unchanged (%)"))


def load(path: Path) -> dict:
    """A bench result; SystemExit naming a file that is not one."""
    try:
        res = json.loads(path.read_text())
        res["unedited"], res["table"]  # noqa: B018 (the fields every result has)
        return res
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise SystemExit(f"{path}: not a bench-bundle-sequential result file ({type(e).__name__}: {e}); "
                         "pass the bundle_sequential.json a run wrote") from None


def _label(result: dict, path: Path) -> str:
    """A run's write rule, with its ``edited_weight`` when that is not 1 (the default)."""
    update = result.get("update") or {}
    weight = update.get("edited_weight", 1.0)
    return update.get("rule", path.stem) + ("" if weight == 1.0 else f", edited_weight {weight:g}")


def plot(results: list[dict], labels: list[str], png: Path) -> None:
    """Write the 2×3 figure of ``results`` (one line each, named by ``labels``) to ``png`` atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    for ax, (key, title) in zip(axes.flat, PANELS):
        for res, label in zip(results, labels):
            rows = [r for r in [res["unedited"], *res["table"]] if r.get(key) is not None]
            ax.plot([r["edits"] for r in rows], [r[key] for r in rows], marker="o", label=label)
        ax.set(title=title, xlabel="edits so far")
        ax.grid(alpha=0.3)
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"{results[0].get('runtime')} bundle, {results[0].get('n')} sequential edits (edit --bundle)")
    save_png(fig, png, dpi=100)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+", help="bundle_sequential.json files")
    ap.add_argument("--labels", nargs="*", help="one per file (default: each run's write rule)")
    ap.add_argument("--out", type=Path, required=True, help="the PNG to write")
    a = ap.parse_args(argv)
    results = [load(p) for p in a.results]
    labels = a.labels or [_label(r, p) for r, p in zip(results, a.results)]
    if len(labels) != len(results):
        raise SystemExit(f"--labels: {len(labels)} labels for {len(results)} files; give one per file")
    plot(results, labels, a.out)
    print(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
