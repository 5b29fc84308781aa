"""Prefix-activation reuse, measured: per-step time of the prefix graph vs the full graph (both
batched over K deltas, same objective) beside the theoretical FLOP ratio of the two."""
from __future__ import annotations

import time

import torch

from .families import Family, get_module, n_layers
from .forward.graph import FullGraph, PrefixGraph
from .forward.prefix import PrefixState


def _linear_params(module: torch.nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear)
               or type(m).__name__ == "Conv1D")


def flops(model, family: Family, layer: int, st: PrefixState, seq_lens: list[int], K: int) -> tuple[float, float]:
    """(full, prefix) multiply-add FLOPs (×2) of one step of K deltas.

    Full: every layer on every token of every row, LM head at every position.
    Prefix: layers > ``layer`` on the S suffix tokens of each row (attending to P + j + 1 keys),
    LM head at the R read-outs.
    """
    L = n_layers(model, family)
    d = st.h_suffix.shape[-1]
    per_layer = [2 * _linear_params(get_module(model, family.layer, i)) for i in range(L)]
    vocab = st.kl_ref.shape[-1]
    head = 2 * d * vocab
    attn = 4 * d  # per (query, key) pair: QK and AV
    full = 0.0
    for T in seq_lens:
        pairs = T * (T + 1) / 2
        full += sum(per_layer) * T + L * attn * pairs + head * T
    B, S, P = st.shape
    valid = st.mask[:, 0].sum(-1).float()  # keys seen by each suffix query [B, S]
    pre = 0.0
    for i in range(layer + 1, L):
        pre += per_layer[i] * B * S + attn * float(valid.sum())
    pre += head * st.readout_row.numel()
    return K * full, K * pre


def time_graph(graph: torch.nn.Module, deltas: torch.Tensor, reps: int) -> float:
    """Median seconds per call over ``reps`` calls (after one warm-up)."""
    graph(deltas)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        graph(deltas)
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


def prefix_speedup(model, family: Family, layer: int, inputs, st: PrefixState, cfg, K: int = 17,
                   reps: int = 5, generator: torch.Generator | None = None) -> dict:
    """Measured and theoretical speed-up of prefix reuse for one edit's graph."""
    g = generator or torch.Generator().manual_seed(0)
    deltas = torch.randn(K, st.h_suffix.shape[-1], generator=g) * 0.01
    t_prefix = time_graph(PrefixGraph(model, family, st, cfg), deltas, reps)
    t_full = time_graph(FullGraph(model, family, layer, inputs, st, cfg), deltas, reps)
    lens = [int(x) for x in inputs.batch.attention_mask.sum(-1)]
    f_full, f_pre = flops(model, family, layer, st, lens, K)
    measured, theory = t_full / t_prefix, f_full / f_pre
    return {"K": K, "t_full_s": t_full, "t_prefix_s": t_prefix, "speedup": measured, "flop_ratio": theory,
            "fraction_of_theory": measured / theory, "flops_full": f_full, "flops_prefix": f_pre}
