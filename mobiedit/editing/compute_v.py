"""Backprop value search (ROME's ``compute_v``): Adam on a delta at the subject's last token,
through the whole model or through the prefix-reusing graph (``ROMEConfig.prefix_reuse``)."""
from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Callable

import torch

from ..families import Family, get_module
from ..hooks import add_at_positions, record, rewrite_output
from .config import ObjectiveConfig, ROMEConfig
from .context import EditInputs
from .objective import edit_holds, full_rows, kl_keep, kl_logprobs, rows_correct, value_loss
from ..driver import start_point

log = logging.getLogger(__name__)


@dataclass
class ValueResult:
    """v* = v_init + delta, with the search's bookkeeping."""

    v_star: torch.Tensor
    v_init: torch.Tensor
    delta: torch.Tensor
    losses: list[float]
    holds: bool  # objective.edit_holds at the final delta (cfg.success_fraction)
    steps: int
    forwards: int
    backwards: int


def init_value_and_kl(model, family: Family, layer: int, inputs: EditInputs) -> tuple[torch.Tensor, torch.Tensor]:
    """The unedited MLP output at the subject's last token of row 0 (``v_init``) and the KL
    reference log-probs, from one forward pass."""
    b = inputs.batch.to(next(model.parameters()).device)
    mod = get_module(model, family.mlp_out, layer)
    with torch.no_grad(), record(mod, inputs=False) as rec:
        logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask,
                       logits_to_keep=kl_keep(inputs).to(b.input_ids.device)).logits
    v_init = rec.output[0, b.subject_idx[0]].float().clone()
    return v_init, kl_logprobs(logits, inputs, kept=True).detach()


#: one evaluation of the objective at a delta: ``delta [d] -> (loss [], full_rows [n_rewrite] bool)``
LossFn = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


def full_loss_fn(model, family: Family, inputs: EditInputs, layer: int, kl_ref: torch.Tensor,
                 v_init_norm: float, cfg: ObjectiveConfig, row_gain: torch.Tensor | None = None) -> LossFn:
    """ROME's own evaluation: the whole model, ``delta`` hooked onto the MLP output of ``layer`` at
    every row's subject (times ``row_gain[b]`` at row b when given); autograd through everything
    (the ``rome`` row)."""
    b = inputs.batch.to(next(model.parameters()).device)
    mod = get_module(model, family.mlp_out, layer)
    gain = None if row_gain is None else row_gain.to(b.input_ids.device).unsqueeze(-1)

    def fn(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        with rewrite_output(mod, add_at_positions(delta if gain is None else gain * delta, b.subject_idx)):
            logits = model(input_ids=b.input_ids, attention_mask=b.attention_mask).logits
        loss = value_loss(logits, inputs, kl_ref, delta.norm(), v_init_norm, cfg)
        return loss, rows_correct(logits.detach(), inputs)

    return fn


def prefix_loss_fn(graph) -> LossFn:
    """The same objective through a :class:`~mobiedit.forward.graph.PrefixGraph` (layers > l at
    the positions from the subject on; the prefix activations computed once): autograd reaches
    only ``delta`` — no weight gradients, no activations of layers ≤ l (the ``rome-lean`` row)."""

    def fn(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss, correct = graph.differentiable(delta.unsqueeze(0))
        return loss[0], full_rows(correct[0].detach(), graph.target_len)

    return fn


def adam_value_search(loss_fn: LossFn, v_init: torch.Tensor, cfg: ROMEConfig,
                      on_step: Callable[[int, float], None] | None = None,
                      start: torch.Tensor | None = None) -> ValueResult:
    """ROME's value search on any evaluation of the objective: Adam on ``delta`` (zero-init),
    clamped to ``clamp_norm_factor·‖v_init‖``.

    Adam runs on ``z = delta / s`` with ``s = ‖v_init‖/√d`` so that ROME's lr (0.5, tuned on
    GPT-2 XL/GPT-J activation scales) means the same step relative to ``v_init`` on any model;
    the objective itself is ROME's, in absolute units.

    ``start`` (model units, clamped into the ball): the delta Adam starts from instead of zero.

    Stops early when the loss drops below ``cfg.early_loss`` (ROME: 5e-2). ``on_step(step, loss)``
    is called after every step (progress display). Only ``delta``'s gradient is computed
    (``torch.autograd.grad``): frozen weights get none.
    """
    scale = v_init.norm() / v_init.numel() ** 0.5
    max_norm = cfg.objective.clamp_norm_factor * v_init.norm() / scale
    z = torch.zeros_like(v_init)  # delta = scale * z
    if start is not None:
        z = torch.from_numpy(start_point(start, float(scale), float(max_norm), v_init.numel())).to(v_init)
    z.requires_grad_(True)
    opt = torch.optim.Adam([z], lr=cfg.lr)
    losses: list[float] = []
    steps, holds = 0, False
    for steps in range(1, cfg.steps + 1):
        opt.zero_grad()
        with torch.enable_grad():
            loss, full_rows = loss_fn(scale * z)
        losses.append(loss.item())
        if on_step is not None:
            on_step(steps, losses[-1])
        if losses[-1] < cfg.early_loss or steps == cfg.steps:
            holds = edit_holds(full_rows, cfg.success_fraction)
            break
        (z.grad,) = torch.autograd.grad(loss, [z])
        opt.step()
        with torch.no_grad():
            if z.norm() > max_norm:
                z.mul_(max_norm / z.norm())
    log.debug("value search: %d steps, loss %.4f -> %.4f", steps, losses[0], losses[-1])
    d = (scale * z).detach()
    return ValueResult(v_star=v_init + d, v_init=v_init, delta=d, losses=losses, holds=holds, steps=steps,
                       forwards=steps + 1, backwards=steps - 1)


def compute_v(model, family: Family, inputs: EditInputs, cfg: ROMEConfig,
              on_step: Callable[[int, float], None] | None = None,
              row_gain: torch.Tensor | None = None, start: torch.Tensor | None = None) -> ValueResult:
    """Find v* by :func:`adam_value_search` — through the whole model (ROME), or, with
    ``cfg.prefix_reuse``, through the prefix-reusing graph the forward-only method uses.
    ``row_gain`` [B]: the delta's gain per prompt row (``UpdateConfig.written_gain``); ``start``:
    the delta the search starts from (None: zero)."""
    if cfg.prefix_reuse:
        from ..forward.graph import PrefixGraph
        from ..forward.prefix import compute_prefix_state

        state = compute_prefix_state(model, family, cfg.layer, inputs, row_gain)
        return adam_value_search(prefix_loss_fn(PrefixGraph(model, family, state, cfg.objective)),
                                 state.v_init, cfg, on_step, start)
    v_init, kl_ref = init_value_and_kl(model, family, cfg.layer, inputs)
    fn = full_loss_fn(model, family, inputs, cfg.layer, kl_ref, float(v_init.norm()), cfg.objective, row_gain)
    return adam_value_search(fn, v_init, cfg, on_step, start)
