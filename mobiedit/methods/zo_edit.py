"""MobiEdit: forward-only value search on a (quantized) static-shape graph with early stopping
and prefix-activation reuse, driven by the ZO loop (native engine by default).

The search runs in normalised units ``z = δ / s`` with ``s = ‖v_init‖/√d``, so ``h``, ``lr`` and
the clamp (``clamp_norm_factor·√d``) mean the same on every model.
"""
from __future__ import annotations

import dataclasses
import math
import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import numpy as np
import torch

from ..errors import ConfigError
from ..forward.graph import FullGraph, PrefixGraph
from ..forward.prefix import compute_prefix_state
from ..forward.quant import QuantConfig, check_prequantized, is_prequantized, quantized_copy
from ..forward.stream import lower_layers_paged_out
from ..models import LoadedModel
from ..requests import EditRequest
from ..rome.config import ContextConfig, ObjectiveConfig, UpdateConfig
from ..rome.context import build_edit_inputs
from ..rome.objective import edit_holds, within_margin
from ..zo import ZOConfig, run_zo
from .common import EditOutcome, ModelContext, module_name, StepFn
from .rome import factors_from_delta

def _default_zo() -> ZOConfig:
    return ZOConfig(estimator="fzoo", n_dirs=16, h=0.05, optimizer="adam", lr=0.5, max_steps=150,
                    max_evals=3000, check_every=1, loss_tol=0.0, patience=0, seed=0)


@dataclass(frozen=True)
class MobiEditConfig:
    """Forward-only editing. ``prefix_reuse``/``early_stop``/``quant`` are the paper's three
    savings and can be switched off one by one for the benchmark rows."""

    layer: int = 1
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    zo: ZOConfig = field(default_factory=_default_zo)
    quant: QuantConfig = field(default_factory=QuantConfig)
    prefix_reuse: bool = True
    early_stop: bool = True
    success_fraction: float = 0.75  # rome.objective.edit_holds: plain prompt + this share of rows
    success_nll: float = 0.5        # ... and the objective minus its decay term (mean target NLL per
                                    # token + KL) at most this: a margin, like ROME's loss-based stop
    backend: str = "native"
    page_out_lower: bool = True     # forward.stream: with prefix reuse, file-backed weights of
                                    # layers ≤ l leave the resident set after each use (the loop
                                    # never runs them)
    mom2_adjustment: bool = True
    mom2_ridge: float = 1e-4
    verify_write: bool = True       # the verdict is the edited model's (methods.verify), not the loop's
    update: UpdateConfig = field(default_factory=UpdateConfig)

    def __post_init__(self) -> None:
        if self.layer < 0:
            raise ConfigError(f"layer must be >= 0, got {self.layer}", where="mobiedit.layer",
                              fix="pick a layer index of the model")
        if not (0.0 <= self.success_fraction <= 1.0):
            raise ConfigError(f"success_fraction={self.success_fraction} out of [0, 1]",
                              where="mobiedit.success_fraction",
                              fix="e.g. 0.75 (plain prompt and 3/4 of the context-templated prompts)")
        if not self.success_nll > 0:
            raise ConfigError(f"success_nll={self.success_nll} must be > 0", where="mobiedit.success_nll",
                              fix="e.g. 0.5 (geometric-mean P(target) >= 0.6)")
        if self.backend not in ("native", "python"):
            raise ConfigError(f"unknown backend {self.backend!r}", where="mobiedit.backend",
                              fix="use 'native' (C++ engine) or 'python' (reference)")


@dataclass
class _Counters:
    evals: int = 0
    distinct: int = 0  # evaluations at distinct points (the paper's estimator repeats x n times a step)
    sequences: int = 0
    calls: int = 0


def build_graph(fwd_model, lm: LoadedModel, req: EditRequest, cfg: MobiEditConfig, ctx: ModelContext):
    """The forward-only graph of one edit (prefix-reusing or full) on ``fwd_model``."""
    inputs = build_edit_inputs(lm.tokenizer, req, ctx.templates, cfg.objective)
    state = compute_prefix_state(fwd_model, lm.family, cfg.layer, inputs)
    if cfg.prefix_reuse:
        return PrefixGraph(fwd_model, lm.family, state, cfg.objective), state, inputs
    return FullGraph(fwd_model, lm.family, cfg.layer, inputs, state, cfg.objective), state, inputs


def forward_model(lm: LoadedModel, cfg: MobiEditConfig) -> torch.nn.Module:
    """The model the loop's forwards run on: a pre-quantized checkpoint (``mobiedit quantize``)
    itself, else a quantized copy of ``lm.model`` per ``cfg.quant`` (``lm.model`` for ``none``).
    Build it once per model and pass it to every :func:`mobiedit_edit`: quantizing costs a copy."""
    if is_prequantized(lm.model):
        check_prequantized(lm.model, lm.family, cfg.layer)
        return lm.model
    return quantized_copy(lm.model, lm.family, cfg.layer, cfg.quant)


def mobiedit_edit(lm: LoadedModel, req: EditRequest, cfg: MobiEditConfig, ctx: ModelContext,
                  fwd_model: torch.nn.Module | None = None, on_step: StepFn | None = None) -> EditOutcome:
    """One forward-only edit. ``fwd_model`` is the (quantized) model the loop's forwards run on
    (default: :func:`forward_model`, built for this edit, its time included in ``wall_time``); the
    factors are computed on ``lm.model``."""
    t0 = time.perf_counter()
    if fwd_model is None:
        fwd_model = forward_model(lm, cfg)
    paging = lower_layers_paged_out(fwd_model, lm.family, cfg.layer) if cfg.page_out_lower and cfg.prefix_reuse \
        else nullcontext()  # a full-graph loop runs every layer each step: nothing to page out
    with paging:
        return _search(lm, req, cfg, ctx, fwd_model, t0, on_step)


def _search(lm: LoadedModel, req: EditRequest, cfg: MobiEditConfig, ctx: ModelContext,
            fwd_model: torch.nn.Module, t0: float, on_step: StepFn | None = None) -> EditOutcome:
    """The prefix state, the ZO loop on its graph, and the factors of the found delta."""
    graph, state, inputs = build_graph(fwd_model, lm, req, cfg, ctx)
    d = state.h_suffix.shape[-1]
    scale = float(state.v_init.norm()) / math.sqrt(d)
    rows = inputs.batch.input_ids.shape[0]
    n = _Counters()

    def forward(D: np.ndarray) -> np.ndarray:
        losses, _ = graph(torch.from_numpy(np.multiply(D, scale, dtype=np.float32)))  # D is read-only
        n.evals += D.shape[0]; n.sequences += D.shape[0] * rows; n.calls += 1
        n.distinct += len(np.unique(D, axis=0))
        if on_step is not None:  # one batched call of K directions = one step
            on_step(n.calls, float(losses.min()))
        return losses.double().numpy()

    v_norm = float(state.v_init.norm())

    def check(x: np.ndarray) -> bool:
        delta = torch.from_numpy(np.multiply(x, scale, dtype=np.float32)).view(1, -1)
        losses, correct = graph(delta)
        n.evals += 1; n.distinct += 1; n.sequences += rows; n.calls += 1
        return (edit_holds(correct[0] >= 1.0 - 1e-6, cfg.success_fraction)
                and within_margin(float(losses[0]), float(delta.norm()), v_norm, cfg.objective, cfg.success_nll))

    zcfg = dataclasses.replace(cfg.zo, max_norm=cfg.objective.clamp_norm_factor * math.sqrt(d))
    res = run_zo(forward, check if cfg.early_stop else None, np.zeros(d, dtype=np.float32), zcfg,
                 backend=cfg.backend)
    res.raise_for_status()
    delta = torch.from_numpy(np.asarray(res.x, dtype=np.float32)) * scale
    succeeded = res.succeeded or check(np.asarray(res.x, dtype=np.float32))
    u, w, key = factors_from_delta(lm, ctx, req, cfg.layer, delta, cfg.mom2_ridge, cfg.update)
    return EditOutcome(method="mobiedit", layer=cfg.layer, module=module_name(lm.family, cfg.layer), u=u, w=w,
                       succeeded=succeeded, status=res.status.value, loss_evals=n.evals, sequences=n.sequences,
                       forward_calls=n.calls + 2, backward_calls=0, wall_time=time.perf_counter() - t0,
                       losses=list(res.history), seed=cfg.zo.seed, key=key, distinct_evals=n.distinct)
