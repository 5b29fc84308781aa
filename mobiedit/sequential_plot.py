"""The figure of ``mobiedit sequential``: each metric against the number of edits made so far, one
line per row — efficacy, generalization, locality, the never-edited probe's true-answer accuracy,
the held-out perplexity change (%) at the checkpoints, and each applied edit's largest relative
move of an earlier edit's written change (``moves_earlier_max``, :mod:`mobiedit.sequential_interference`).
"""
from __future__ import annotations

from pathlib import Path

#: checkpoint panels: (table key, title, y label, a rate in percent: y from 0 to 100)
PANELS = (("efficacy_acc", "Efficacy (all edits so far)", "token acc %", True),
          ("generalization_acc", "Generalization", "token acc %", True),
          ("locality_acc", "Locality (neighbours)", "unchanged %", True),
          ("probe_true_acc", "Never-edited facts: true answer", "token acc %", True),
          ("perplexity_change_pct", "Held-out perplexity change", "% vs unedited", False))


def _finite(v) -> float:
    """``v`` as a float, NaN for None."""
    return float("nan") if v is None else float(v)


def _checkpoint_panel(ax, results: list[dict], key: str, title: str, ylabel: str, rate: bool) -> None:
    """One checkpoint metric against edits so far, a line with markers per row."""
    for res in results:
        xs = [r["edits"] for r in res["table"]]
        ax.plot(xs, [_finite(r.get(key)) for r in res["table"]], marker="o", label=res["row"])
    if rate:
        ax.set_ylim(-3, 103)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("edits so far")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)


def _moves_panel(ax, results: list[dict]) -> None:
    """Per applied edit, ``moves_earlier_max`` (log scale when every value is positive)."""
    positive = True
    for res in results:
        pts = [(e["edit"], e["moves_earlier_max"]) for e in res["edits"]
               if e["applied"] and e.get("moves_earlier_max") is not None]
        positive &= all(y > 0 for _, y in pts)
        ax.plot([x for x, _ in pts], [y for _, y in pts], marker=".", linewidth=0.8, label=res["row"])
    if positive and any(ax.get_lines()):
        ax.set_yscale("log")
    ax.set_title("Interference: max ‖ΔW_i k_j‖ / ‖ΔW_j k_j‖", fontsize=10)
    ax.set_xlabel("edit i")
    ax.set_ylabel("over earlier edits j")
    ax.grid(alpha=0.3)


def plot(results: list[dict], png: Path) -> None:
    """Write the 2×3 figure of ``results`` (rows of the result file) to ``png`` atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .atomic import save_png

    fig, axes = plt.subplots(2, 3, figsize=(15, 8))
    from matplotlib.ticker import MaxNLocator

    for ax, (key, title, ylabel, rate) in zip(axes.flat, PANELS):
        _checkpoint_panel(ax, results, key, title, ylabel, rate)
    _moves_panel(axes.flat[5], results)
    n = max((r["n_edits"] for r in results), default=0)
    for ax in axes.flat:  # one x range, 1..n, on every panel
        ax.set_xlim(0.5, n + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    axes.flat[0].legend(fontsize=8)
    fig.suptitle(f"Sequential editing: {n} edits, {len(results)} rows", fontsize=11)
    save_png(fig, png, dpi=110)
