"""Editing runs: prepare a model once, then edit requests one after another (or each on the
unedited model), journaling what is applied and scoring it.

Sequential semantics (``mobiedit edit``): each request is edited on the model as left by the
previous edits; a failed edit is reported and not applied unless ``force``. Independent semantics
(``mobiedit bench``): each request is edited on the unedited model, scored, and undone.
"""
from __future__ import annotations

import logging
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Union

import torch
from tqdm import tqdm

from .evaluate import RequestScores, pre_edit_snapshot, score_request
from .families import get_module
from .forward.stream import lower_layers_paged_out
from .journal import Journal, apply_factors
from .methods.common import EditOutcome, ModelContext, StepFn, prepare_context
from .methods.rome import rome_edit
from .methods.zo_edit import MobiEditConfig, mobiedit_edit
from .models import LoadedModel
from .requests import EditRequest
from .rome.config import ROMEConfig

log = logging.getLogger(__name__)

MethodConfig = Union[ROMEConfig, MobiEditConfig]


def stats_texts_for(lm: LoadedModel) -> list[str]:
    """The corpus for key statistics: the fact LM's own pretraining corpus, else the bundled
    CounterFact prompts with their answers (a small generic text sample)."""
    from .factlm.pipeline import corpus_of, load_records

    own = corpus_of(lm.path)
    if own is not None:
        return own
    recs, train = load_records()
    return [f"{r['prompt']} {r['ground_truth']}" for r in recs + train[:3000]]


def prepare(lm: LoadedModel, cfg: MethodConfig, seed: int, progress: bool = False) -> ModelContext:
    """Context templates (seeded) and key statistics of the edit layer. A config that pages out
    the lower layers (:mod:`mobiedit.forward.stream`) does so here as well."""
    mom2 = getattr(cfg, "mom2_adjustment", True)
    texts = stats_texts_for(lm) if mom2 else None
    paging = lower_layers_paged_out(lm.model, lm.family, cfg.layer) \
        if getattr(cfg, "page_out_lower", False) and getattr(cfg, "prefix_reuse", False) else nullcontext()
    with paging:
        return prepare_context(lm, [cfg.layer], cfg.context, texts, torch.Generator().manual_seed(seed), progress)


def run_method(lm: LoadedModel, req: EditRequest, cfg: MethodConfig, ctx: ModelContext,
               fwd_model: torch.nn.Module | None = None, on_step: StepFn | None = None) -> EditOutcome:
    """Dispatch on the config type (a table, not name checks)."""
    if isinstance(cfg, ROMEConfig):
        return rome_edit(lm, req, cfg, ctx, on_step)
    return mobiedit_edit(lm, req, cfg, ctx, fwd_model, on_step)


@contextmanager
def step_progress(req: EditRequest, enabled: bool) -> Iterator[StepFn | None]:
    """A second progress line under the per-request bar: step and loss of the running edit (one
    ROME edit of a 135M model takes minutes on one core)."""
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
    weight = get_module(lm.model, lm.family.mlp_out, out.layer).weight
    with torch.no_grad():
        weight.copy_(apply_factors(weight, out.u, out.w, lm.family.weight_out_in))


@dataclass
class EditRecord:
    """One request of a run: its outcome, whether it was applied, and its scores."""

    request: EditRequest
    outcome: EditOutcome
    applied: bool
    scores: RequestScores | None = None


def edit_sequential(lm: LoadedModel, reqs: list[EditRequest], cfg: MethodConfig, ctx: ModelContext,
                    journal: Journal | None, force: bool = False, progress: bool = True) -> list[EditRecord]:
    """Edit ``reqs`` in order on ``lm`` (modified in place), journaling applied edits."""
    out: list[EditRecord] = []
    for req in tqdm(reqs, desc="edit", disable=not progress):
        with step_progress(req, progress) as on_step:
            res = run_method(lm, req, cfg, ctx, on_step=on_step)
        apply = res.succeeded or force
        if apply:
            if journal is not None:
                base = get_module(lm.model, lm.family.mlp_out, res.layer).weight.detach().clone()
                journal.record(req, res.method, lm.family, res.layer, res.module, res.u, res.w, base,
                               metrics=res.summary(), config={"seed": res.seed})
            apply_outcome(lm, res)
        else:
            log.warning("edit %s did not reach its success criterion (%s); not applied (use --force)",
                        req.case_id, res.status)
        out.append(EditRecord(req, res, apply))
    return out


def edit_independent(lm: LoadedModel, reqs: list[EditRequest], cfg: MethodConfig, ctx: ModelContext,
                     progress: bool = True, fwd_model: torch.nn.Module | None = None) -> list[EditRecord]:
    """Edit each request on the unedited model, score it, restore the weight bit-exactly."""
    out: list[EditRecord] = []
    for req in tqdm(reqs, desc="edit+eval", disable=not progress):
        pre = pre_edit_snapshot(lm.model, lm.tokenizer, req)
        with step_progress(req, progress) as on_step:
            res = run_method(lm, req, cfg, ctx, fwd_model, on_step)
        weight = get_module(lm.model, lm.family.mlp_out, res.layer).weight
        saved = weight.detach().clone()
        apply_outcome(lm, res)
        scores = score_request(lm.model, lm.tokenizer, req, pre)
        with torch.no_grad():
            weight.copy_(saved)
        out.append(EditRecord(req, res, True, scores))
    return out


def base_model_of(lm: LoadedModel, journal_dir: Path) -> torch.nn.Module | None:
    """A copy of ``lm.model`` with every journaled edit undone (the pre-edit model), or None."""
    import copy

    if not (journal_dir / "journal.jsonl").is_file():
        return None
    j = Journal.open(journal_dir)
    base = copy.deepcopy(lm.model)
    for module in {e.module for e in j.entries()}:
        with torch.no_grad():
            base.get_submodule(module).weight.copy_(j.base_weight(module))
    return base
