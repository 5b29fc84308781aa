"""The picture of a ``mobiedit tune`` sweep: one bar per candidate, the chosen one highlighted."""
from __future__ import annotations

import textwrap
from pathlib import Path

_SHORT = {"efficacy_prob": "effP", "generalization_prob": "genP", "efficacy_acc": "eff", "generalization_acc": "gen",
          "locality_unchanged": "locU"}


def plot(table: list[dict], best: int, png: Path, title: str, columns: tuple[str, ...], ok: list[bool],
         ruled_out: str = "") -> None:
    """One bar per candidate (its score, the harmonic mean of ``columns``), the chosen one ``best``
    highlighted, those with ``ok[i]`` false (ruled out by the perplexity budget or the success guard,
    described by ``ruled_out`` under the title) grey and hatched; each bar annotated with its mean
    perplexity change and success rate where measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .atomic import save_png

    fig, ax = plt.subplots(figsize=(max(6.0, 0.5 * len(table) + 2), 4.5))
    labels = [f"L{r['layer']} " + " ".join(f"{k.split('.')[-1]}={v}" for k, v in r["settings"].items())
              if r["settings"] else f"L{r['layer']} current" for r in table]
    scores = [0.0 if r["score"] != r["score"] else r["score"] for r in table]
    colors = ["tab:orange" if i == best else "tab:blue" if ok[i] else "0.75" for i in range(len(table))]
    bars = ax.bar(range(len(table)), scores, color=colors)
    for bar, r, fine in zip(bars, table, ok):
        if not fine:
            bar.set_hatch("//")
        ppl, succ = r.get("perplexity_change_pct", float("nan")), r.get("success_rate", float("nan"))
        text = "\n".join(t for t in (f"ppl {ppl:+.3f} %" if ppl == ppl else "",
                                     f"succ {succ:.0f} %" if succ == succ else "") if t)
        if text:
            ax.annotate(text, (bar.get_x() + bar.get_width() / 2, bar.get_height()), ha="center", va="bottom",
                        fontsize=7)
    if ruled_out and not all(ok):
        title += "\n" + "\n".join(textwrap.wrap(f"grey, hatched: not chosen ({ruled_out})", 90))
    ax.set_xticks(range(len(table)), labels, rotation=60, ha="right", fontsize=7)
    ax.set_ylabel(f"score: harmonic mean of {', '.join(_SHORT.get(c, c) for c in columns)} (%)")
    ax.set_ylim(0, 112)
    ax.set_title(title, fontsize=9)
    ax.grid(alpha=0.3, axis="y")
    save_png(fig, png)
