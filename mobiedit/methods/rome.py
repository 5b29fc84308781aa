"""Backprop ROME: Adam value search, then the mom2-adjusted rank-one update."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass

import torch

from ..models import LoadedModel
from ..requests import EditRequest
from ..editing.compute_k import compute_keys, row_keys
from ..editing.compute_v import compute_v
from ..editing.config import ROMEConfig, UpdateConfig, written_layers
from ..editing.context import EditInputs, build_edit_inputs
from ..editing.update import null_space_direction, protected_moment, rank_one_factors, rows_direction, solve_c
from .common import EditOutcome, ModelContext, StepFn, module_name


@dataclass(frozen=True)
class EditKeys:
    """What the rank-one update of one request needs before any value is known: ``k_bar`` (the key
    averaged over the context templates), ``k_cur`` / ``out_cur`` (key and output at the plain
    prompt) and ``direction`` (``w``'s direction; ``w = direction / (direction·k_cur)``)."""

    k_bar: torch.Tensor
    k_cur: torch.Tensor
    out_cur: torch.Tensor
    direction: torch.Tensor


def _direction(ctx: ModelContext, layer: int, k_rows: torch.Tensor, mom2_ridge: float,
               update: UpdateConfig) -> torch.Tensor:
    """The update direction for the template keys ``k_rows`` [n, d] (average ``k̄``): ROME's
    ``C⁻¹k̄`` by default, or AlphaEdit's null-space solve against ``ctx.projector`` and
    ``ctx.edited_keys``, or (``protect``) ``C⁻¹k̄`` with ``ctx.edited_keys`` added to ``C``, or
    (``rows``) the least-``C``-norm direction that is 1 at every key of ``k_rows``, or
    (``rows-protect``) that direction with ``ctx.edited_keys`` added to ``C``."""
    k_bar = k_rows.mean(0)
    if update.rule == "nullspace":
        return null_space_direction(ctx.projector[layer], k_bar, ctx.edited_keys.get(layer, []), update.alpha)
    c = ctx.mom2.get(layer)
    if update.rule in ("protect", "rows-protect"):
        c = protected_moment(c, ctx.edited_keys.get(layer, []), update.edited_weight)
    if update.rule in ("rows", "rows-protect"):
        return rows_direction(c, k_rows, mom2_ridge, update.rows_ridge)
    return solve_c(c, k_bar, mom2_ridge)


def edit_keys(lm: LoadedModel, ctx: ModelContext, req: EditRequest, layer: int, mom2_ridge: float,
              update: UpdateConfig) -> EditKeys:
    """The keys and the update direction of ``req`` on the float model ``lm``
    (:class:`~mobiedit.editing.config.UpdateConfig` picks the direction)."""
    k_rows, k_cur, out_cur = compute_keys(lm.model, lm.family, layer, lm.tokenizer, ctx.templates,
                                          req.rewrite_prompt, req.subject)
    return EditKeys(k_rows.mean(0), k_cur, out_cur, _direction(ctx, layer, k_rows, mom2_ridge, update))


def gains_at(k_rows: torch.Tensor, keys: EditKeys) -> torch.Tensor:
    """[B] ``wᵀk_b`` at each prompt row's subject key ``k_rows`` [B, d_in]: the share of the searched
    delta the written update ``u wᵀ`` delivers at row ``b`` (1 at the plain prompt, by construction)."""
    k = k_rows.double()
    d = keys.direction.double().to(k.device)
    return ((k @ d) / torch.dot(keys.k_cur.double().to(k.device), d)).float()


def factors_from_delta(lm: LoadedModel, ctx: ModelContext, req: EditRequest, layer: int, delta: torch.Tensor,
                       mom2_ridge: float, update: UpdateConfig | None = None, keys: EditKeys | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(u, w, k̄) of the rank-one update that maps the subject's key to v* = W k_cur + ``delta``.

    The key and current output are measured on the float model ``lm`` (:func:`edit_keys`, unless
    ``keys`` are given), whatever graph found the delta, so the update is exact for the weights it
    is applied to.
    """
    keys = keys or edit_keys(lm, ctx, req, layer, mom2_ridge, update or UpdateConfig())
    u, w = rank_one_factors(keys.k_cur, keys.out_cur, keys.out_cur + delta.to(keys.out_cur), keys.direction)
    return u, w, keys.k_bar


def search_keys(lm: LoadedModel, ctx: ModelContext, req: EditRequest, layer: int, mom2_ridge: float,
                update: UpdateConfig, inputs: EditInputs) -> tuple[EditKeys | None, torch.Tensor | None]:
    """With ``update.written_gain``: the request's :class:`EditKeys` and the rows' gains for the
    search graph, computed before the search; else (None, None) (keys after the search, δ at every row).

    One float forward of the edit's rows gives both: the rewrite rows are ``template(prompt) +
    target``, so (causal attention) their subject keys are :func:`edit_keys`'s context keys, and the
    ``"{}"`` template's row is the plain prompt. Templates without ``"{}"`` take the keys apart."""
    if not update.written_gain:
        return None, None
    k_rows, out_rows = row_keys(lm.model, lm.family, layer, inputs.batch)
    if "{}" not in ctx.templates:
        keys = edit_keys(lm, ctx, req, layer, mom2_ridge, update)
        return keys, gains_at(k_rows, keys)
    plain = ctx.templates.index("{}")
    rewrite = k_rows[:inputs.n_rewrite]
    keys = EditKeys(rewrite.mean(0), k_rows[plain], out_rows[plain], _direction(ctx, layer, rewrite, mom2_ridge, update))
    return keys, gains_at(k_rows, keys)


def search_model(lm: LoadedModel, cfg: ROMEConfig) -> torch.nn.Module | None:
    """The quantized copy of ``lm.model`` the backprop search runs on per ``cfg.quant``, or None
    (the float model itself)."""
    if cfg.quant.scheme == "none" and cfg.quant.head_dtype == "float32":
        return None
    from ..forward.quant import quantized_copy

    return quantized_copy(lm.model, lm.family, written_layers(cfg.layer, cfg.update), cfg.quant)


def key_model(lm: LoadedModel, fwd_model: torch.nn.Module | None, update: UpdateConfig) -> LoadedModel:
    """The model the keys and the current output are read from (``update.key_source``): ``lm``,
    whose float weights serve the edit, or with ``"search"`` the forward model the search ran on."""
    if update.key_source == "search" and fwd_model is not None and fwd_model is not lm.model:
        return dataclasses.replace(lm, model=fwd_model)
    return lm


def rome_edit(lm: LoadedModel, req: EditRequest, cfg: ROMEConfig, ctx: ModelContext,
              on_step: StepFn | None = None, fwd_model: torch.nn.Module | None = None,
              start: torch.Tensor | None = None) -> EditOutcome:
    """One ROME edit by backprop. The model is not modified (apply the returned factors).
    ``on_step(step, loss)`` reports each Adam step. ``fwd_model``: the model the value search runs
    on: a :func:`~mobiedit.forward.quant.quantized_copy` per ``cfg.quant`` (default: built for this
    edit, as :func:`~mobiedit.session.forward_model_for` builds it once for many; ``lm.model`` for
    the float search); the key and the factors are measured on ``lm.model`` (:func:`key_model`).
    ``start``: the value delta the search starts from (None: zero; a clamp ladder's earlier rung)."""
    t0 = time.perf_counter()
    if fwd_model is None:
        fwd_model = search_model(lm, cfg)
    inputs = build_edit_inputs(lm.tokenizer, req, ctx.templates, cfg.objective)
    klm = key_model(lm, fwd_model, cfg.update)
    keys, gains = search_keys(klm, ctx, req, cfg.layer, cfg.mom2_ridge, cfg.update, inputs)
    with torch.enable_grad():
        vr = compute_v(fwd_model if fwd_model is not None else lm.model, lm.family, inputs, cfg, on_step, gains, start)
    u, w, key = factors_from_delta(klm, ctx, req, cfg.layer, vr.delta, cfg.mom2_ridge, cfg.update, keys)
    rows = inputs.batch.input_ids.shape[0]
    succeeded = vr.holds
    return EditOutcome(method="rome", layer=cfg.layer, module=module_name(lm.family, cfg.layer), u=u, w=w,
                       succeeded=succeeded, status="SUCCESS_CHECK" if succeeded else "MAX_STEPS",
                       loss_evals=vr.forwards, sequences=vr.forwards * rows, forward_calls=vr.forwards + 2,
                       backward_calls=vr.backwards, wall_time=time.perf_counter() - t0, losses=vr.losses, key=key,
                       loop_holds=succeeded, delta=vr.delta.detach().float().cpu())
