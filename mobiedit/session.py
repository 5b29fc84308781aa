"""Editing runs: prepare a model once, then edit requests one after another (or each on the
unedited model), journaling what is applied and scoring it.

Sequential semantics (``mobiedit edit``): each request is edited on the model as left by the
previous edits; a failed edit is reported and not applied unless ``force``. Independent semantics
(``mobiedit bench``): each request is edited on the unedited model, scored, and undone.
"""
from __future__ import annotations

import dataclasses
import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, Union

import torch
from tqdm import tqdm

from .ability import AbilityProbe
from .evaluate import RequestScores, pre_edit_snapshot, score_request
from .families import check_edit_layer, get_module
from .journal import Journal
from .ladder import climb, needs_ladder, sequential_ladder, warm_start
from .stats_corpus import stats_corpus_for
from .methods import METHODS, method_name
from .methods.common import (REFUSED, EditOutcome, ModelContext, StepFn, applies, prepare_context,
                             refused_outcome)
from .methods.verify import check_written
from .methods.mobiedit import MobiEditConfig, forward_model
from .methods.mobiedit import lower_layers_paged as paged_lower
from .methods.rome import key_model, search_model
from .models import LoadedModel
from .prompts import request_refusal
from .editing.update import null_space_projector, write_factors
from .errors import ConfigError
from .requests import EditRequest
from .spread import check_spreadable, spread_written
from .editing.config import ROMEConfig, written_layers

log = logging.getLogger(__name__)

MethodConfig = Union[ROMEConfig, MobiEditConfig]


def lower_layers_paged(lm: LoadedModel, cfg: MethodConfig):
    """:func:`~mobiedit.methods.mobiedit.lower_layers_paged` of ``lm.model`` (the float model the
    key statistics and the write check run on)."""
    return paged_lower(lm.model, lm.family, cfg)


def prepare(lm: LoadedModel, cfg: MethodConfig, seed: int, progress: bool = False) -> ModelContext:
    """Context templates (seeded) and key statistics of each layer the edit writes (the edit layer;
    with ``update.spread`` the layers below it too). A config that pages out the lower layers
    (:mod:`mobiedit.forward.stream`) does so here as well."""
    layers = written_layers(cfg.layer, cfg.update)
    check_edit_layer(lm.model, lm.family, layers)
    mom2 = getattr(cfg, "mom2_adjustment", True)
    corpus = stats_corpus_for(lm) if mom2 else None
    with lower_layers_paged(lm, cfg):
        ctx = prepare_context(lm, list(layers), cfg.context, corpus.texts if corpus else None,
                              torch.Generator().manual_seed(seed), progress,
                              stats_source=corpus.source if corpus else None)
    if cfg.update.rule == "nullspace":
        for layer in layers:
            if layer not in ctx.mom2:
                raise ConfigError("the nullspace update rule needs the layer's key statistics",
                                  where="update.rule", fix="keep mom2_adjustment on, or use update.rule 'rome'")
            ctx.projector[layer] = null_space_projector(ctx.mom2[layer], cfg.update.nullspace_threshold)
    return ctx


def seed_edited_keys(lm: LoadedModel, ctx: ModelContext, journal: Journal, layer: int) -> int:
    """Put the keys of ``journal``'s active edits of ``layer`` into ``ctx.edited_keys`` (a session
    that continues an edited folder), each with its request. A key at layer ``l`` is the input of
    that layer's edited matrix, which no edit of that matrix changes: recomputed from the recorded
    request, it is the key the edit was solved at when only ``l`` was written, and the key as the
    model stands now when a spread edit also wrote a layer below ``l``. Returns how many keys were
    added."""
    from .editing.compute_k import template_keys

    n = 0
    for e in journal.entries(active_only=True):
        if e.layer == layer:
            req = e.edit_request()
            ctx.protect(layer, template_keys(lm.model, lm.family, layer, lm.tokenizer, ctx.templates,
                                             req.rewrite_prompt, req.subject).mean(0), req)
            n += 1
    return n


def forward_model_for(lm: LoadedModel, cfg: MethodConfig) -> torch.nn.Module | None:
    """The model ``cfg``'s value search runs on, built once: MobiEdit's forward model, a backprop
    config's quantized copy when its ``quant`` asks for one (None: ROME on the float model)."""
    if isinstance(cfg, MobiEditConfig):
        return forward_model(lm, cfg)
    return search_model(lm, cfg)


def sequential_config(cfg: MethodConfig, n_edits: int) -> MethodConfig:
    """``cfg`` for a session that leaves ``n_edits`` edits on one model: when that needs the ladder
    (:func:`~mobiedit.ladder.needs_ladder`) and ``cfg`` has none of its own, ``update.clamp_ladder``
    becomes :func:`~mobiedit.ladder.sequential_ladder` of the objective's clamp (``clamp_ladder: [c]``
    in a config keeps one clamp). One edit: ``cfg`` unchanged."""
    if not needs_ladder(n_edits) or cfg.update.clamp_ladder:
        return cfg
    ladder = sequential_ladder(cfg.objective.clamp_norm_factor)
    return dataclasses.replace(cfg, update=dataclasses.replace(cfg.update, clamp_ladder=ladder))


def run_method(lm: LoadedModel, req: EditRequest, cfg: MethodConfig, ctx: ModelContext,
               fwd_model: torch.nn.Module | None = None, on_step: StepFn | None = None,
               judge: Callable[[EditOutcome], EditOutcome] | None = None) -> EditOutcome:
    """The edit of ``cfg``'s method (:func:`run_once`); with ``cfg.update.clamp_ladder``, climbed
    by :func:`mobiedit.ladder.climb` (each clamp in turn, smallest first, until the edited model
    says the fact; warm rungs per ``update.ladder_warm_start``). The outcome is the last try's, its
    costs (evaluations, calls, time, losses) the sum of every try's, and ``config`` records the
    factor used (``clamp_norm_factor``), the rungs tried (``ladder_tries``) and whether the last
    one started warm (``ladder_warm``). ``judge`` re-judges each try's outcome as it will be
    written (a spread edit's verdict, :func:`mobiedit.spread.spread_written`): the ladder climbs
    on its ``succeeded``."""
    ladder = cfg.update.clamp_ladder
    judged = judge if judge is not None else (lambda out: out)
    if not ladder:
        return judged(run_once(lm, req, cfg, ctx, fwd_model, on_step))

    def attempt(factor: float, start: torch.Tensor | None) -> EditOutcome:
        tried = dataclasses.replace(cfg, objective=dataclasses.replace(cfg.objective, clamp_norm_factor=factor))
        return judged(run_once(lm, req, tried, ctx, fwd_model, on_step, start))

    def start_of(out: EditOutcome) -> torch.Tensor | None:
        return warm_start(out.delta, out.loop_succeeded) if cfg.update.ladder_warm_start else None

    rungs = climb(ladder, attempt, lambda out: out.succeeded, start_of)
    total = rungs[0].result
    for rung in rungs[1:]:
        total = _with_costs_of(rung.result, total)
    last = rungs[-1]
    config = {**total.config, "clamp_norm_factor": last.factor, "ladder_tries": len(rungs), "ladder_warm": last.warm}
    # a spread edit's parts journal the same figures of the whole edit (each keeps its spread_part)
    parts = tuple(dataclasses.replace(p, config={**config, "spread_part": p.config["spread_part"]}) for p in total.parts)
    return dataclasses.replace(total, config=config, parts=parts)


def _with_costs_of(out: EditOutcome, before: EditOutcome) -> EditOutcome:
    """``out`` with ``before``'s costs added (an earlier try of the same edit)."""
    def add(name: str) -> int | float:
        return getattr(before, name) + getattr(out, name)

    distinct = None if out.distinct_evals is None and before.distinct_evals is None else \
        (before.distinct_evals or before.loss_evals) + (out.distinct_evals or out.loss_evals)
    summed = {k: before.config.get(k, 0) + out.config[k] for k in ("written_checks", "written_refused")
              if k in out.config}  # every rung's written-edit checks, as the bundle path counts them
    return dataclasses.replace(out, loss_evals=add("loss_evals"), sequences=add("sequences"),
                               forward_calls=add("forward_calls"), backward_calls=add("backward_calls"),
                               wall_time=add("wall_time"), losses=before.losses + out.losses, distinct_evals=distinct,
                               config={**out.config, **summed})


def run_once(lm: LoadedModel, req: EditRequest, cfg: MethodConfig, ctx: ModelContext,
             fwd_model: torch.nn.Module | None = None, on_step: StepFn | None = None,
             start: torch.Tensor | None = None) -> EditOutcome:
    """The edit of ``cfg``'s method (looked up by config type in :data:`~mobiedit.methods.METHODS`,
    not by name checks); then, unless ``cfg.verify_write`` is off, the verdict of the edited model
    (:func:`~mobiedit.methods.verify.check_written`). ``fwd_model`` goes to a forward-only method
    (None: the method builds its own); ``start`` the delta its search starts from (None: zero)."""
    _, edit_fn = METHODS[method_name(cfg)]
    searched = {"fwd_model": fwd_model} if fwd_model is not None else {}
    out = edit_fn(lm, req, cfg, ctx, on_step=on_step, start=start, **searched)
    if not cfg.verify_write:
        return out
    if out.write:  # the method's search already judged these factors on the edited model (stop_on "written")
        return dataclasses.replace(out, succeeded=out.write["holds"], loop_succeeded=out.succeeded)
    t0 = time.perf_counter()
    # "the model says the new fact": edit_holds on the edited model, for both methods; the NLL
    # margin of MobiEdit's check stays what it is, the search's stop rule (docs/results.md)
    with lower_layers_paged(lm, cfg):  # its forwards run layers ≤ l too: their pages go back after use
        chk = check_written(lm, req, out, ctx, cfg.objective, cfg.success_fraction, None)
    return dataclasses.replace(out, succeeded=chk.holds, loop_succeeded=out.succeeded,
                               write=chk.as_dict(), forward_calls=out.forward_calls + 3,
                               wall_time=out.wall_time + time.perf_counter() - t0)


@contextmanager
def step_progress(req: EditRequest, enabled: bool) -> Iterator[StepFn | None]:
    """A second progress line under the per-request bar: step and loss of the running edit (one
    ROME edit of a 135M model takes tens of seconds; a forward-only one minutes)."""
    if not enabled:
        yield None
        return
    bar = tqdm(desc=f"  {req.case_id} step", unit="step", position=1, leave=False)

    def on_step(step: int, loss: float) -> None:
        bar.n = step
        bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
        bar.refresh()

    try:
        yield on_step
    finally:
        bar.close()


def apply_outcome(lm: LoadedModel, out: EditOutcome) -> None:
    """Write ``out``'s rank-one factors into the model (journal arithmetic, bit-reproducible)."""
    write_factors(get_module(lm.model, lm.family.mlp_out, out.layer).weight, out.u, out.w, lm.family.weight_out_in)


def check_fits(lm: LoadedModel, reqs: list[EditRequest], ctx: ModelContext | None = None, subjects: bool = True
               ) -> None:
    """Refuse (RequestError), before any forward pass, a request longer than the model's positions
    (with the longest context template of ``ctx``; :func:`mobiedit.prompts.check_request_lengths`)
    and, with ``subjects``, one whose subject is its prompt's first token
    (:func:`mobiedit.prompts.subject_context_error`). A harness that records each edit passes
    ``subjects=False``: :meth:`EditSession.edit` refuses such a request alone."""
    from .prompts import check_request_lengths, position_limit, template_reserve

    reserve = template_reserve(lm.tokenizer, ctx.templates) if ctx is not None else 0
    check_request_lengths(lm.tokenizer, reqs, position_limit(lm.model.config), reserve)
    for err in (request_refusal(lm.tokenizer, r) for r in (reqs if subjects else ())):
        if err is not None:
            raise err


#: what of an outcome's ``config`` a journal entry records (the clamp ladder's rung, :func:`run_method`;
#: a batch edit's batch and its size, :mod:`mobiedit.batch`; a search stopped on the written verdict,
#: ``stop_on`` "written", its checks and refusals — summed over a ladder's rungs, as the bundle's;
#: a spread edit's layer count and which part of it the entry is, :mod:`mobiedit.spread`; a
#: forward-only edit's search: its ZO settings, success rule and forward scheme, as a bundle edit's)
JOURNALED_CONFIG = ("clamp_norm_factor", "ladder_tries", "ladder_warm", "batch", "batch_size", "stop_on",
                    "written_checks", "written_refused", "spread", "spread_part", "zo", "success_fraction",
                    "success_nll", "quant")


def journal_config(out: EditOutcome) -> dict:
    """The ``config`` a journal entry of ``out`` records: its seed and, for a clamp-ladder edit,
    the clamp that was written and how many rungs it took."""
    return {"seed": out.seed, **{k: out.config[k] for k in JOURNALED_CONFIG if k in out.config}}


@dataclass
class EditRecord:
    """One request of a run: its outcome, whether it was applied, and its scores."""

    request: EditRequest
    outcome: EditOutcome
    applied: bool
    scores: RequestScores | None = None


@dataclass
class EditSession:
    """The per-model state of an editing run, built once by :meth:`open`: the method config, the
    :class:`ModelContext` (templates, key statistics, null-space state), the forward model a
    forward-only search runs on (one quantized copy for the whole session, not one per request),
    and the journal applied edits are recorded in. It owns the weight write (:meth:`apply`):
    float model, journal, the forward model's float copy of the edited matrix and the edited keys
    change together."""

    lm: LoadedModel
    cfg: MethodConfig
    ctx: ModelContext
    fwd_model: torch.nn.Module | None = None
    journal: Journal | None = None

    @classmethod
    def open(cls, lm: LoadedModel, cfg: MethodConfig, ctx: ModelContext, journal: Journal | None = None,
             fwd_model: torch.nn.Module | None = None) -> "EditSession":
        """A session over ``lm`` with ``ctx`` (from :func:`prepare`); ``fwd_model`` defaults to
        :func:`forward_model_for` (quantized here, once). A spread config is checked here, before
        any search (:func:`~mobiedit.spread.check_spreadable`)."""
        if cfg.update.spread > 1:
            check_spreadable(lm, written_layers(cfg.layer, cfg.update))
        return cls(lm, cfg, ctx, fwd_model if fwd_model is not None else forward_model_for(lm, cfg), journal)

    def edit(self, req: EditRequest, on_step: StepFn | None = None) -> EditOutcome:
        """Search and verify one edit on the model as it stands; nothing is written. With
        ``update.spread`` > 1 each try is judged as the spread write (its ``parts``). A request
        :func:`~mobiedit.prompts.request_refusal` refuses gets a :data:`~mobiedit.methods.common.REFUSED`
        outcome, unsearched."""
        err = request_refusal(self.lm.tokenizer, req)
        if err is not None:
            log.warning("edit %s refused: %s", req.case_id, err)
            return refused_outcome(self.lm, method_name(self.cfg), self.cfg.layer, str(err))
        judge = (lambda out: spread_written(self, req, out)) if self.cfg.update.spread > 1 else None
        return run_method(self.lm, req, self.cfg, self.ctx, self.fwd_model, on_step, judge)

    def weight(self, layer: int) -> torch.nn.Parameter:
        """The edited matrix of ``layer`` in the float model."""
        return get_module(self.lm.model, self.lm.family.mlp_out, layer).weight

    def sync_forward(self, layer: int) -> None:
        """Copy the edited matrix into the forward model (it keeps that matrix in float: a float
        island of :func:`~mobiedit.forward.quant.quantized_copy`, so the copy is exact)."""
        if self.fwd_model is None or self.fwd_model is self.lm.model:
            return
        island = get_module(self.fwd_model, self.lm.family.mlp_out, layer).weight
        with torch.no_grad():
            island.copy_(self.weight(layer).to(island.dtype))

    def apply(self, req: EditRequest, out: EditOutcome, keep: bool = True) -> None:
        """Write ``out``. ``keep``: the edit stays — journaled first (when the session has a
        journal), and its key joins the edited keys later null-space solves protect; without
        ``keep`` it is a trial (an independent bench edit) that :meth:`restore` undoes."""
        if keep and self.journal is not None:
            base = self.weight(out.layer).detach().clone()
            self.journal.record(req, out.method, self.lm.family, out.layer, out.module, out.u, out.w, base,
                                metrics=out.summary(), config=journal_config(out))
        apply_outcome(self.lm, out)
        if keep:  # a trial is scored on the float model and undone before any search sees it
            self.sync_forward(out.layer)
        if keep and out.key is not None:  # later null-space solves of this session protect it
            self.ctx.protect(out.layer, out.key, req)
            refresh = self.cfg.update.key_refresh
            if refresh and out.layer == self.cfg.layer and len(self.ctx.edited_keys[out.layer]) % refresh == 0:
                self.ctx.reread_keys(key_model(self.lm, self.fwd_model, self.cfg.update))

    def restore(self, layer: int, weight: torch.Tensor) -> None:
        """Put ``weight`` back into the edit matrix (bit-exact; an independent bench edit's undo)."""
        with torch.no_grad():
            self.weight(layer).copy_(weight)
        self.sync_forward(layer)


def written_parts(session: EditSession, req: EditRequest, out: EditOutcome, force: bool = False
                  ) -> tuple[EditOutcome, list[EditOutcome]]:
    """The edit ``out`` (:meth:`EditSession.edit`'s) as the session writes it: (outcome, the
    rank-one parts to apply in order) — ``out`` itself, or a spread edit's ``parts``; a spread edit
    whose search passed nothing is spread here only with ``force``
    (:func:`mobiedit.spread.spread_written`)."""
    if out.parts:
        return out, list(out.parts)
    if session.cfg.update.spread == 1 or not force:
        return out, [out]
    out = spread_written(session, req, out, force)
    return out, list(out.parts) or [out]


def edit_sequential(lm: LoadedModel, reqs: list[EditRequest], cfg: MethodConfig, ctx: ModelContext,
                    journal: Journal | None, force: bool = False, progress: bool = True) -> list[EditRecord]:
    """Edit ``reqs`` in order on ``lm`` (modified in place) in one :class:`EditSession`,
    journaling applied edits."""
    check_fits(lm, reqs, ctx)
    session = EditSession.open(lm, cfg, ctx, journal)
    out: list[EditRecord] = []
    for req in tqdm(reqs, desc="edit", disable=not progress):
        with step_progress(req, progress) as on_step:
            res = session.edit(req, on_step)
        res, parts = written_parts(session, req, res, force)
        apply = applies(res, force)
        if apply:
            for part in parts:
                session.apply(req, part)
        else:
            why = ("the search's check passed, but the edited model does not meet it" if res.loop_succeeded
                   else f"search stopped: {res.status}")
            log.warning("edit %s did not reach its success criterion (%s); not applied (use --force)", req.case_id, why)
        out.append(EditRecord(req, res, apply))
    return out


def edit_independent(lm: LoadedModel, reqs: list[EditRequest], cfg: MethodConfig, ctx: ModelContext,
                     progress: bool = True, fwd_model: torch.nn.Module | None = None,
                     ability: AbilityProbe | None = None) -> list[EditRecord]:
    """Edit each request on the unedited model, score it, restore the weight bit-exactly.
    ``ability`` (built on the unedited model at the edit layer) adds fluency and perplexity. A
    refused request (:func:`~mobiedit.prompts.request_refusal`) is recorded unapplied and scored on
    the unedited model."""
    check_fits(lm, reqs, ctx, subjects=False)
    if cfg.update.spread > 1:
        raise ConfigError("update.spread writes an edit over several layers; independent (bench) edits restore "
                          "one layer", where="update.spread", fix="use it in a sequential session (mobiedit edit / "
                          "sequential), or spread: 1")
    session = EditSession.open(lm, cfg, ctx, None, fwd_model)
    out: list[EditRecord] = []
    for req in tqdm(reqs, desc="edit+eval", disable=not progress):
        pre = pre_edit_snapshot(lm.model, lm.tokenizer, req, ability)
        with step_progress(req, progress) as on_step:
            res = session.edit(req, on_step)
        if res.status == REFUSED:  # nothing is written: scored on the unedited model
            out.append(EditRecord(req, res, False, score_request(lm.model, lm.tokenizer, req, pre, ability)))
            continue
        saved = session.weight(res.layer).detach().clone()
        session.apply(req, res, keep=False)
        scores = score_request(lm.model, lm.tokenizer, req, pre, ability)
        session.restore(res.layer, saved)
        out.append(EditRecord(req, res, True, scores))
    return out
