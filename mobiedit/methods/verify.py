"""Verify after write (issue 18): the verdict on an edit is taken on the *edited* model.

The value search judges a delta added at the layer's output on its own graph (quantized, at the
searched positions); what is written is a rank-one update of the float weight through ``C⁻¹k̄``.
:func:`check_written` applies the factors to the float model, runs one forward of the
request's prompt batch with no delta (the model the user will serve; split at the edit layer so
the read-out goes by vocabulary slices), asks whether it says the
new fact there (:func:`~mobiedit.editing.objective.edit_holds`: the plain prompt and ``success_fraction``
of the templated ones show the whole target — the search's NLL margin is its stop rule, not part
of "says it": a written edit delivers ~5 % less than the searched delta at the templates' keys,
enough to miss a 0.5 margin while every prompt still says the target), and restores the weight bit-exactly. It also measures the write error: at a
key ``k`` the search added ``δ`` where the write adds ``u (wᵀk)``, so the relative error there is
``‖u (wᵀk) − δ‖ / ‖δ‖ = |wᵀk − 1|`` — 0 at the plain prompt's key (the update is solved there),
non-zero at the context templates' keys, whose average ``k̄`` sets only the direction.
"""
from __future__ import annotations

import dataclasses
from dataclasses import asdict, dataclass

import torch

from ..families import get_module
from ..forward.graph import PrefixGraph
from ..forward.prefix import compute_prefix_state
from ..journal import apply_factors
from ..models import LoadedModel
from ..requests import EditRequest
from ..editing.compute_k import keys_at_subject
from ..editing.config import ObjectiveConfig
from ..editing.context import EditInputs, build_edit_inputs
from ..editing.objective import edit_holds, full_rows, within_margin
from .common import EditOutcome, ModelContext


@dataclass(frozen=True)
class WriteCheck:
    """The edited model's verdict on one edit and the write error at the edit's keys."""

    holds: bool                    # the method's success rule on the edited model
    loss: float                    # the objective there (no delta: decay term 0)
    rows_correct: float            # share of rewrite rows whose whole target is the argmax
    write_error_plain: float       # |wᵀk_cur − 1| at the plain rewrite prompt's key
    write_error_templates_mean: float   # mean |wᵀk_i − 1| over the context templates' keys
    write_error_templates_max: float

    def as_dict(self) -> dict:
        return asdict(self)


def _model_rows(lm: LoadedModel, inputs, layer: int, objective: ObjectiveConfig,
                kl_ref: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(losses [1], correct [1, rows]) of ``lm.model`` as it stands on an edit's ``inputs``, no delta.
    The forward is split at layer l (prefix reuse is exact) so that its read-out goes by vocabulary
    slices: a full forward's logits at every position would be rows × tokens × vocabulary floats
    (334 MB at the 0.5B shape). ``kl_ref``: the KL reference to score against (default: this model's)."""
    state = compute_prefix_state(lm.model, lm.family, layer, inputs)
    if kl_ref is not None:
        state = dataclasses.replace(state, kl_ref=kl_ref)
    return PrefixGraph(lm.model, lm.family, state, objective)(
        torch.zeros(1, state.h_suffix.shape[-1], device=state.h_suffix.device))


def says_now(lm: LoadedModel, req: EditRequest, ctx: ModelContext, objective: ObjectiveConfig, layer: int,
             success_fraction: float) -> bool:
    """Whether ``lm.model`` as it stands says ``req``'s new fact:
    :func:`~mobiedit.editing.objective.edit_holds` on its rewrite rows (the verdict of a batch
    written at once, where no single edit's factors can be applied and removed)."""
    inputs = build_edit_inputs(lm.tokenizer, req, ctx.templates, objective)
    _, correct = _model_rows(lm, inputs, layer, objective)
    return bool(edit_holds(full_rows(correct[0], inputs.target_len), success_fraction))


def check_written(lm: LoadedModel, req: EditRequest, out: EditOutcome, ctx: ModelContext, objective: ObjectiveConfig,
                  success_fraction: float, success_nll: float | None) -> WriteCheck:
    """Apply ``out``'s factors to ``lm.model``, judge, restore (:func:`check_factors`)."""
    return check_factors(lm, req, out.layer, out.u, out.w, ctx, objective, success_fraction, success_nll)


def check_factors(lm: LoadedModel, req: EditRequest, layer: int, u: torch.Tensor, w: torch.Tensor, ctx: ModelContext,
                  objective: ObjectiveConfig, success_fraction: float, success_nll: float | None) -> WriteCheck:
    """Apply the rank-one factors ``u``, ``w`` at ``layer`` to ``lm.model``, judge, restore the
    weight bit-exactly: :func:`written_judge` for one pair of factors (four forwards of ``lm.model``:
    unedited prefix state, keys, edited prefix and suffix)."""
    return written_judge(lm, req, layer, ctx, objective)(u, w, success_fraction, success_nll)


@dataclass(frozen=True)
class WrittenJudge:
    """The edited model's verdict on factors of one request at one layer, its parts that do not
    depend on the factors measured once (:func:`written_judge`): the rows, the unedited model's KL
    reference and the keys at the plain prompt and the templates. A search that asks for the
    verdict of many candidate deltas (``stop_on`` "written") pays two forwards per call, not four."""

    lm: LoadedModel
    layer: int
    objective: ObjectiveConfig
    inputs: EditInputs             # the request's rows
    kl_ref: torch.Tensor | None    # the unedited model's KL reference
    v_init_norm: float             # ‖v_init‖ of the unedited model (the NLL margin's scale)
    keys: torch.Tensor             # [1 + templates, d_in]: the plain prompt's key, then the templates'

    def __call__(self, u: torch.Tensor, w: torch.Tensor, success_fraction: float,
                 success_nll: float | None) -> WriteCheck:
        """Apply ``u``, ``w``, judge, restore. ``success_nll`` None: the rule is
        :func:`~mobiedit.editing.objective.edit_holds` alone (ROME's); else also
        :func:`~mobiedit.editing.objective.within_margin` (MobiEdit's)."""
        fam = self.lm.family
        gain = (self.keys.double() @ w.double().to(self.keys.device)) - 1.0
        weight = get_module(self.lm.model, fam.mlp_out, self.layer).weight
        saved = weight.detach().clone()
        try:
            with torch.no_grad():
                weight.copy_(apply_factors(weight, u, w, fam.weight_out_in))
            losses, correct = _model_rows(self.lm, self.inputs, self.layer, self.objective, self.kl_ref)
        finally:
            with torch.no_grad():
                weight.copy_(saved)
        full = full_rows(correct[0], self.inputs.target_len)  # correct: per-row counts of argmax targets
        holds = edit_holds(full, success_fraction)
        if success_nll is not None:
            holds = holds and within_margin(float(losses[0]), 0.0, self.v_init_norm, self.objective, success_nll)
        tmpl = gain[1:].abs()
        return WriteCheck(holds=bool(holds), loss=float(losses[0]), rows_correct=float(full.float().mean()),
                          write_error_plain=float(gain[0].abs()), write_error_templates_mean=float(tmpl.mean()),
                          write_error_templates_max=float(tmpl.max()))


def written_judge(lm: LoadedModel, req: EditRequest, layer: int, ctx: ModelContext,
                  objective: ObjectiveConfig, inputs: EditInputs | None = None) -> WrittenJudge:
    """The :class:`WrittenJudge` of ``req`` on ``lm.model`` as it stands (two forwards: the
    unedited prefix state and the subject keys). The model must not change between this call and
    the judge's calls other than through the judge itself (which restores what it writes).
    ``inputs``: the request's rows already built with ``lm.tokenizer``, ``ctx.templates`` and
    ``objective`` (None: built here)."""
    if inputs is None:
        inputs = build_edit_inputs(lm.tokenizer, req, ctx.templates, objective)
    state = compute_prefix_state(lm.model, lm.family, layer, inputs)  # unedited: the KL reference
    prompts = [t.replace("{}", req.rewrite_prompt) for t in ctx.templates]
    keys, _ = keys_at_subject(lm.model, lm.family, layer, lm.tokenizer, [req.rewrite_prompt, *prompts], req.subject)
    return WrittenJudge(lm=lm, layer=layer, objective=objective, inputs=inputs, kl_ref=state.kl_ref,
                        v_init_norm=float(state.v_init.norm()), keys=keys)
