"""Batch edits (issue 16, MEMIT/AlphaEdit form): a request list applied as batches of N, one solve
per batch.

Each request of a batch is searched on the model as the previous batches left it (the value search
and its verdict are the single edit's: :meth:`~mobiedit.session.EditSession.edit`, clamp ladder
included); then one solve (:func:`~mobiedit.editing.update.batch_factors`) gives factors whose
sum meets every request of the batch exactly at its key — where sequential edits would each move
the keys of the ones before. The batch is written as N rank-one journal entries (undo stays
bit-exact per entry; undoing one member leaves the others as solved, no longer exact at the undone
key's neighbours), and the verdict of each request is the model's after the whole batch is written
(:func:`~mobiedit.methods.verify.says_now`).
"""
from __future__ import annotations

import dataclasses
import logging

import torch
from tqdm import tqdm

from .editing.compute_k import keys_at_subject
from .editing.update import batch_factors
from .errors import ConfigError
from .journal import Journal
from .methods.common import EditOutcome, ModelContext, applies
from .methods.verify import says_now
from .models import LoadedModel
from .requests import EditRequest
from .session import EditRecord, EditSession, MethodConfig, check_fits

log = logging.getLogger(__name__)


def check_batch_size(batch: int) -> None:
    """Refuse a batch size below 1 (ConfigError naming ``--batch``)."""
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ConfigError(f"batch size must be an integer >= 1, got {batch!r}", where="--batch",
                          fix="e.g. --batch 10 (1: one solve per edit, the sequential session)")


def plain_keys(lm: LoadedModel, layer: int, reqs: list[EditRequest]) -> torch.Tensor:
    """[N, d_in] the edited matrix's input at each request's subject in its plain rewrite prompt
    (``k_cur``; an edit of that matrix does not change it)."""
    return torch.stack([keys_at_subject(lm.model, lm.family, layer, lm.tokenizer, [r.rewrite_prompt], r.subject)[0][0]
                        for r in reqs])


def solve_batch(lm: LoadedModel, layer: int, reqs: list[EditRequest], outs: list[EditOutcome]) -> list[EditOutcome]:
    """``outs`` (each request's own search, on the model before the batch) with ``u`` replaced by
    the batch solve: the value change each searched (its ``u``) met at every key at once."""
    u = batch_factors(plain_keys(lm, layer, reqs), torch.stack([o.w for o in outs]), torch.stack([o.u for o in outs]))
    return [dataclasses.replace(o, u=u[i].to(o.u)) for i, o in enumerate(outs)]


def edit_batch(session: EditSession, reqs: list[EditRequest], index: int, force: bool) -> list[EditRecord]:
    """Search ``reqs`` on the model as it stands, solve the ones that passed alone (all with
    ``force``, but a refused one) as one batch, write them, and judge each on the model with the
    batch written."""
    if session.cfg.update.spread > 1:
        raise ConfigError("a batch solve writes one layer; update.spread writes several", where="update.spread",
                          fix="use spread: 1 with --batch, or edit one request after another (no --batch)")
    found = [session.edit(r) for r in reqs]
    take = [i for i, o in enumerate(found) if applies(o, force)]
    records = {i: EditRecord(reqs[i], found[i], False) for i in range(len(reqs)) if i not in take}
    for i in records:
        log.warning("edit %s did not reach its success criterion alone; left out of batch %d (use --force)",
                    reqs[i].case_id, index)
    if take:
        lm, cfg = session.lm, session.cfg
        solved = solve_batch(lm, cfg.layer, [reqs[i] for i in take], [found[i] for i in take])
        for i, out in zip(take, solved):
            session.apply(reqs[i], dataclasses.replace(out, config={**out.config, "batch": index,
                                                                    "batch_size": len(take)}))
        for i, out in zip(take, solved):
            held = says_now(lm, reqs[i], session.ctx, cfg.objective, cfg.layer, cfg.success_fraction)
            records[i] = EditRecord(reqs[i], dataclasses.replace(out, succeeded=held, loop_succeeded=found[i].succeeded,
                                                                config={**out.config, "batch": index}), True)
    return [records[i] for i in range(len(reqs))]


def edit_batched(lm: LoadedModel, reqs: list[EditRequest], cfg: MethodConfig, ctx: ModelContext,
                 journal: Journal | None, batch: int, force: bool = False, progress: bool = True) -> list[EditRecord]:
    """Edit ``reqs`` in batches of ``batch`` on ``lm`` (modified in place) in one
    :class:`~mobiedit.session.EditSession` (see the module docstring); one record per request, in
    order. A record's ``outcome.succeeded`` is the verdict with its whole batch written,
    ``loop_succeeded`` its own search's (alone), ``outcome.config["batch"]`` its batch."""
    check_batch_size(batch)
    check_fits(lm, reqs, ctx)
    session = EditSession.open(lm, cfg, ctx, journal)
    out: list[EditRecord] = []
    chunks = [reqs[i:i + batch] for i in range(0, len(reqs), batch)]
    for index, chunk in enumerate(tqdm(chunks, desc=f"batches of {batch}", disable=not progress)):
        out += edit_batch(session, chunk, index, force)
    return out
