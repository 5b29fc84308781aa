"""Row-sampled steps: the loop's K deltas scored on a random subset of the rewrite rows.

The objective's NLL term is a mean over the rewrite rows (the plain prompt and its
context-templated variants); a subset's mean is an unbiased estimate of it, and a step's cost
is proportional to its rows. :class:`RowSampledGraph` draws, per call (one ZO step), the plain
prompt plus ``rows − 1`` of the other rewrite rows (without replacement, from an explicit
``torch.Generator``), keeps every KL row, and scores all K deltas of the step on that same subset
(common random rows: the estimator's differences between directions see one objective). The
success rule is never taken on a subset: :func:`mobiedit.driver.search_value` checks on the full
graph.
"""
from __future__ import annotations

import copy
import dataclasses

import torch

from .graph import PrefixGraph
from .prefix import PrefixState


def sub_state(state: PrefixState, rewrite_rows: torch.Tensor) -> PrefixState:
    """``state`` over the rewrite rows ``rewrite_rows`` (sorted indices < ``n_rewrite``) and every
    KL row, in that order; read-outs kept in their order, rows renumbered."""
    n_rw = state.n_rewrite
    B = state.h_suffix.shape[0]
    dev = state.h_suffix.device
    keep = torch.cat([rewrite_rows.to(dev), torch.arange(n_rw, B, device=dev)])
    new_of = torch.full((B,), -1, dtype=torch.long, device=dev)
    new_of[keep] = torch.arange(keep.numel(), device=dev)
    r = new_of[state.readout_row]
    on = r >= 0
    return dataclasses.replace(
        state, h_suffix=state.h_suffix[keep], prefix_k=[k[keep] for k in state.prefix_k],
        prefix_v=[v[keep] for v in state.prefix_v], mask=state.mask[keep],
        pe={t: (c[keep], s[keep]) for t, (c, s) in state.pe.items()},
        readout_row=r[on], readout_pos=state.readout_pos[on], readout_label=state.readout_label[on],
        n_rewrite=int(rewrite_rows.numel()), row_gain=None if state.row_gain is None else state.row_gain[keep],
        mlp_rows=None if state.mlp_rows is None else state.mlp_rows[keep],
        mlp_normed=None if state.mlp_normed is None else state.mlp_normed[keep])


class RowSampledGraph:
    """:class:`~mobiedit.driver.EditGraph` of the loop's steps over ``rows`` rewrite rows of
    ``graph`` a call (the module docstring). ``rows`` ≥ the graph's rewrite rows: every row (the
    graph itself, nothing drawn)."""

    def __init__(self, graph: PrefixGraph, rows: int, generator: torch.Generator) -> None:
        if rows < 1:
            raise ValueError(f"rows must be >= 1, got {rows}")
        self.graph, self.generator = graph, generator
        n_rw = graph.n_rewrite
        self.rows = min(rows, n_rw)
        self.n_rows = self.rows + (graph.n_rows - n_rw)  # driver.EditGraph: rows a delta runs
        self.n_rewrite, self.target_len = self.rows, graph.target_len

    def draw(self) -> torch.Tensor:
        """The next step's rewrite rows: 0 (the plain prompt) and ``rows − 1`` others, sorted."""
        others = torch.randperm(self.graph.n_rewrite - 1, generator=self.generator)[:self.rows - 1] + 1
        return torch.cat([torch.zeros(1, dtype=torch.long), others.sort().values])

    def __call__(self, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        if self.rows == self.graph.n_rewrite:
            return self.graph(deltas)
        sub = copy.copy(self.graph)  # shares the blocks, norm and head; only the state differs
        sub.state = sub_state(self.graph.state, self.draw())
        sub.n_rows, sub.n_rewrite = self.n_rows, self.rows
        sub.k_chunk = max(1, self.graph.k_chunk * self.graph.n_rows // self.n_rows)  # the same transient bound
        return sub(deltas)
