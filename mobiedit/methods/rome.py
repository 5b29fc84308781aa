"""Backprop ROME: Adam value search, then the mom2-adjusted rank-one update."""
from __future__ import annotations

import time

import torch

from ..models import LoadedModel
from ..requests import EditRequest
from ..editing.compute_k import compute_key
from ..editing.compute_v import compute_v
from ..editing.config import ROMEConfig, UpdateConfig
from ..editing.context import build_edit_inputs
from ..editing.update import null_space_direction, rank_one_factors, solve_c
from .common import EditOutcome, ModelContext, StepFn, module_name


def factors_from_delta(lm: LoadedModel, ctx: ModelContext, req: EditRequest, layer: int, delta: torch.Tensor,
                       mom2_ridge: float, update: UpdateConfig | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(u, w, k̄) of the rank-one update that maps the subject's key to v* = W k_cur + ``delta``.

    The key and current output are measured on the float model ``lm``, whatever graph found the
    delta, so the update is exact for the weights it is applied to. ``update`` picks ``w``'s
    direction (:class:`~mobiedit.editing.config.UpdateConfig`: ROME's ``C⁻¹k̄`` by default, or
    AlphaEdit's null-space solve against ``ctx.projector`` and ``ctx.edited_keys``).
    """
    update = update or UpdateConfig()
    k_bar, k_cur, out_cur = compute_key(lm.model, lm.family, layer, lm.tokenizer, ctx.templates,
                                        req.rewrite_prompt, req.subject)
    if update.rule == "nullspace":
        direction = null_space_direction(ctx.projector[layer], k_bar, ctx.edited_keys.get(layer, []), update.alpha)
    else:
        direction = solve_c(ctx.mom2.get(layer), k_bar, mom2_ridge)
    u, w = rank_one_factors(k_cur, out_cur, out_cur + delta.to(out_cur), direction)
    return u, w, k_bar


def rome_edit(lm: LoadedModel, req: EditRequest, cfg: ROMEConfig, ctx: ModelContext,
              on_step: StepFn | None = None) -> EditOutcome:
    """One ROME edit by backprop. The model is not modified (apply the returned factors).
    ``on_step(step, loss)`` reports each Adam step."""
    t0 = time.perf_counter()
    inputs = build_edit_inputs(lm.tokenizer, req, ctx.templates, cfg.objective)
    with torch.enable_grad():
        vr = compute_v(lm.model, lm.family, inputs, cfg, on_step)
    u, w, key = factors_from_delta(lm, ctx, req, cfg.layer, vr.delta, cfg.mom2_ridge, cfg.update)
    rows = inputs.batch.input_ids.shape[0]
    succeeded = vr.holds
    return EditOutcome(method="rome", layer=cfg.layer, module=module_name(lm.family, cfg.layer), u=u, w=w,
                       succeeded=succeeded, status="SUCCESS_CHECK" if succeeded else "MAX_STEPS",
                       loss_evals=vr.forwards, sequences=vr.forwards * rows, forward_calls=vr.forwards + 2,
                       backward_calls=vr.backwards, wall_time=time.perf_counter() - t0, losses=vr.losses, key=key)
