"""What ``mobiedit bench`` shows: the table's lines and the PNG (success against loss
evaluations beside the quality bars) of the rows' summaries (:func:`mobiedit.bench.row_summary`)."""
from __future__ import annotations

from pathlib import Path


def plot(results: list[dict], png: Path) -> None:
    """Success rate against loss evaluations per edit (cumulative over the N edits), one line per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, qx) = plt.subplots(1, 2, figsize=(13, 4.5), gridspec_kw={"width_ratios": [7, 6]})
    for r in results:
        ev = sorted(e for e, s in zip(r["loss_evals_per_edit"], r["succeeded_per_edit"]) if s)
        if not ev:
            continue
        xs = [0] + ev
        ys = [0] + [100.0 * (i + 1) / r["n"] for i in range(len(ev))]
        ax.step(xs, ys, where="post", label=f"{r['row']} ({r['success_rate']:.0f}%)")
    ax.set_xscale("symlog", linthresh=10)
    ax.set_xlabel("loss evaluations per edit")
    ax.set_ylabel("edits succeeded (%)")
    ax.set_title("Success rate vs. loss evaluations")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    _quality_bars(qx, results)
    from .atomic import save_png

    save_png(fig, png)


#: quality panel of the PNG: (aggregate key, label); rates in percent
_BARS = (("efficacy_prob", "eff P(new>true)"), ("generalization_prob", "gen P(new>true)"),
         ("locality_unchanged", "loc unchanged"), ("locality_truth", "loc truth"), ("efficacy_acc", "eff acc"))


def _quality_bars(ax, results: list[dict]) -> None:
    """Grouped bars: per row, the probability-convention efficacy/generalization and locality
    against both references (unchanged vs the unedited model; the ground truth)."""
    import math

    width = 0.8 / max(len(results), 1)
    for i, r in enumerate(results):
        vals = [r["quality"].get(k, float("nan")) for k, _ in _BARS]
        xs = [j + (i - (len(results) - 1) / 2) * width for j in range(len(_BARS))]
        ppl = r["quality"].get("perplexity_change_pct", float("nan"))
        label = r["row"] if math.isnan(ppl) else f"{r['row']} (ppl {ppl:+.2f}%)"
        ax.bar(xs, [0.0 if math.isnan(v) else v for v in vals], width, label=label)
    ax.set_xticks(range(len(_BARS)), [lab for _, lab in _BARS], fontsize=8, rotation=15)
    ax.set_ylim(0, 105)
    ax.set_ylabel("%")
    ax.set_title("Edit quality")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(fontsize=8)


def format_rows(results: list[dict]) -> str:
    """One line per row: token-accuracy metrics, probability metrics, locality against the unedited
    model (locU) and the ground truth (locT), fluency before→after (bits), perplexity change (%)
    over all edits and over the applied ones (ppl%a: the edits that succeeded), the success rate
    (the edited model's verdict), the search's own (loop%) and their agreement, the agreement of
    the search graph's edit_holds with it (agreeH%), then the cost columns."""
    head = (f"{'row':<20}{'n':>5}{'eff':>6}{'gen':>6}{'loc':>6}{'effP':>6}{'genP':>6}{'locP':>6}{'locU':>6}"
            f"{'locT':>6}{'flu pre>post':>13}{'ppl%':>7}{'ppl%a':>7}{'succ%':>7}"
            f"{'loop%':>7}{'agree%':>7}{'agreeH%':>8}{'evals(med)':>11}{'seqs':>9}{'fwd':>7}{'bwd':>6}{'s/edit':>8}{'RSS MB':>8}")
    lines = [head]
    nan = float("nan")
    for r in results:
        q = r["quality"]
        med = r["loss_evals_median_success"]
        lines.append(f"{r['row']:<20}{r['n']:>5}{q['efficacy_acc']:>6.1f}{q['generalization_acc']:>6.1f}{q['locality_acc']:>6.1f}"
                     f"{q['efficacy_prob']:>6.1f}{q['generalization_prob']:>6.1f}{q['locality_prob']:>6.1f}"
                     f"{q.get('locality_unchanged', nan):>6.1f}{q.get('locality_truth', nan):>6.1f}"
                     f"{_fluency(q):>13}{q.get('perplexity_change_pct', nan):>7.2f}"
                     f"{r.get('quality_applied', {}).get('perplexity_change_pct', nan):>7.2f}"
                     f"{r['success_rate']:>7.1f}{r.get('loop_success_rate', nan):>7.1f}{r.get('verdict_agreement', nan):>7.1f}"
                     f"{r.get('holds_agreement', nan):>8.1f}"
                     f"{(med if med is not None else float('nan')):>11.0f}"
                     f"{r['sequences_mean']:>9.0f}{r['forward_calls_mean']:>7.0f}{r['backward_calls_mean']:>6.0f}"
                     f"{r['wall_per_edit_s']:>8.2f}{r['peak_rss_mb']:>8.0f}")
    refused = {r["row"]: len(r["refused"]) for r in results if r.get("refused")}
    if refused:  # scored unedited, costs 0 evaluations: mobiedit.prompts.subject_context_error
        lines.append("refused before any search (subject at the prompt's position 0; scored on the unedited model): "
                     + ", ".join(f"{row} {n}" for row, n in refused.items()))
    return "\n".join(lines)


def _fluency(q: dict) -> str:
    """``"5.61>5.58"``: mean n-gram entropy before and after the edit, or ``-`` when not measured."""
    pre, post = q.get("fluency_pre", float("nan")), q.get("fluency", float("nan"))
    return "-" if pre != pre else f"{pre:.2f}>{post:.2f}"
