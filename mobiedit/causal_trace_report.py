"""Reporting of a causal trace (:class:`mobiedit.causal_trace.TraceResult`): the text table, the
heatmap PNG and ``trace.json`` + ``trace.png`` written atomically (``mobiedit trace``)."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

import torch

from .causal_trace import TraceResult


def format_table(result: TraceResult, title: str = "") -> str:
    """Aligned text table: one row per ``state@position``, one column per layer."""
    names = [name for name, _ in result.rows()]
    w = max(len("mean indirect effect"), *(len(x) for x in names))
    head = f"{'mean indirect effect':<{w}}" + "".join(f"{f'L{l}':>9}" for l in range(result.n_layers))
    lines = [title] if title else []
    lines.append(f"P(true first token): clean {result.p_clean:.4f}  corrupted {result.p_corrupt:.4f}  "
                 f"total effect {result.total_effect:+.4f}  (n={result.n}, noise {result.noise:g} x std "
                 f"{result.noise_std:.4g})")
    lines.append(head)
    lines += [f"{name:<{w}}" + "".join(f"{v:>+9.4f}" for v in vals) for name, vals in result.rows()]
    return "\n".join(lines)


def plot_trace(result: TraceResult, png: str | os.PathLike, title: str = "") -> None:
    """Heatmap (rows ``state@position``, columns layers) of the mean indirect effect, written
    atomically to ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from .atomic import save_png

    names, vals = zip(*result.rows())
    data = torch.tensor(vals)
    lim = max(float(data.abs().max()), abs(result.total_effect), 1e-6)
    fig, ax = plt.subplots(figsize=(1.2 + 0.7 * result.n_layers + 1.6, 0.9 + 0.45 * len(names)))
    im = ax.imshow(data.numpy(), cmap="RdBu_r", vmin=-lim, vmax=lim, aspect="auto")
    if result.n_layers <= 32:
        for (r, c), v in zip(((r, c) for r in range(len(names)) for c in range(result.n_layers)), data.flatten()):
            ax.text(c, r, f"{float(v):+.2f}", ha="center", va="center", fontsize=7,
                    color="white" if abs(float(v)) > 0.6 * lim else "black")
    ax.set_xticks(range(result.n_layers), [str(l) for l in range(result.n_layers)])
    ax.set_yticks(range(len(names)), names)
    ax.set_xlabel("layer")
    ax.set_title((title + "\n" if title else "") + f"mean indirect effect on P(true), n={result.n}, "
                 f"P clean {result.p_clean:.2f} / corrupted {result.p_corrupt:.2f}", fontsize=9)
    fig.colorbar(im, ax=ax, fraction=0.04)
    save_png(fig, png)


def write_outputs(result: TraceResult, out: str | os.PathLike, meta: Mapping | None = None,
                  title: str = "") -> tuple[Path, Path]:
    """Write ``trace.json`` (``meta`` + :meth:`TraceResult.to_dict`) and ``trace.png`` atomically
    into the folder ``out`` (created if missing). Returns both paths."""
    from .atomic import atomic_write_text

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    js, png = out / "trace.json", out / "trace.png"
    atomic_write_text(js, json.dumps({**(meta or {}), **result.to_dict()}, indent=1))
    plot_trace(result, png, title)
    return js, png
