"""One sequential row: many edits applied one after another on one model with the journal; the
retention of the earlier edits, locality drift, held-out perplexity, per-edit interference and
bit-exact undo (docs/reliability.md, "Sequential editing").

:func:`open_baseline` loads the model once and measures what every row compares against (the
unedited model's neighbour answers, probe accuracy, perplexity). :func:`run_row` then edits the
``n_edits`` requests after the first ``offset`` in order in one :class:`~mobiedit.session.EditSession` (each edit sees
the model left by the previous ones, exactly as ``mobiedit edit`` does), journaling every applied
edit. At each checkpoint it scores, with :mod:`mobiedit.evaluate` and :mod:`mobiedit.ability`,

* every request edited so far (efficacy / generalization / locality; locality compares each
  neighbour prompt's argmax tokens with the *unedited* model's);
* a fixed probe of ``probe`` further requests that are never edited (locality vs the unedited
  model, and the token accuracy of their true answers): the drift of unrelated knowledge;
* the perplexity of held-out natural text (:class:`~mobiedit.ability.AbilityProbe`) and its
  change against the unedited model, in percent;
* the relative Frobenius drift of the edited weight;

and records, per edit, its interference with the earlier ones (:mod:`mobiedit.sequential_interference`).
Then it undoes ``n_undo`` randomly chosen edits one by one through :meth:`Journal.undo` and
checks after each that the edited module equals, bit for bit, the weight rebuilt independently
of the journal — the pre-edit weight snapshot plus the in-memory factors of the remaining edits
in id order — and that every other parameter still equals the unedited model; finally it undoes
the rest and checks that the whole model equals the unedited one bit for bit.
"""
from __future__ import annotations

import logging
import random
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
from tqdm import tqdm

from .errors import ConfigError
from .sequential_interference import InterferenceTracker, window_summary
from .quiet import NOTICE

log = logging.getLogger(__name__)


def checkpoint_marks(checkpoints: Sequence[int], n_edits: int) -> tuple[int, ...]:
    """The checkpoints within ``1..n_edits``, sorted, with ``n_edits`` itself always one."""
    return tuple(sorted({c for c in checkpoints if 1 <= c <= n_edits} | {n_edits}))


@dataclass(frozen=True)
class SeqSettings:
    """What every row of one run shares: the model, edit layer, request file, number of edits,
    checkpoints (:func:`checkpoint_marks`), seed, ``force`` (apply edits that missed their success
    criterion), random undos, probe size and held-out perplexity tokens (0: no perplexity)."""

    model_dir: Path
    layer: int
    requests: Path
    n_edits: int
    marks: tuple[int, ...]
    seed: int = 0
    force: bool = False
    n_undo: int = 10
    probe: int = 20
    ppl_tokens: int = 2048
    offset: int = 0  # requests skipped before the first edit (a held-out sequence of the same file)

    def identity(self) -> dict[str, Any]:
        """What a row's result depends on besides its config (a saved row is reused only when equal)."""
        from .digest import files_sha256

        return {"model": str(Path(self.model_dir).resolve()), "requests_sha256": files_sha256([self.requests]),
                "n": self.n_edits, "checkpoints": list(self.marks), "seed": self.seed, "force": self.force,
                "undo": self.n_undo, "probe": self.probe, "ppl_tokens": self.ppl_tokens,
                **({"offset": self.offset} if self.offset else {})}


@dataclass
class Baseline:
    """The unedited model and its measurements, shared by every row of a run: the requests to edit
    and the probe, each request's pre-edit snapshot, a copy of every parameter, the edited module's
    name, the probe's true-answer accuracy and the perplexity probe (None: not measured)."""

    lm: Any
    edits: list
    probes: list
    pre: dict
    base_params: dict[str, torch.Tensor]
    module: str
    probe_true: float
    ability: Any = None
    perplexity: float = float("nan")


def probe_true_acc(model, tok, reqs) -> float:
    """Token accuracy (%) of the true answers of ``reqs`` on their rewrite prompts (NaN: none)."""
    from .evaluate import teacher_forced, token_acc

    pairs = [(r.rewrite_prompt, r.target_true) for r in reqs if r.target_true]
    if not pairs:
        return float("nan")
    acc = token_acc(teacher_forced(model, tok, [p for p, _ in pairs], [t for _, t in pairs]))
    return 100.0 * sum(acc) / len(acc)


def open_baseline(s: SeqSettings) -> Baseline:
    """Load the model, the edit requests and the probe, and measure the unedited model.

    Raises:
        ConfigError: fewer requests than edits (``where="--n"``); RequestError for a request
            longer than the model's positions.
    """
    from .ability import AbilityConfig, AbilityProbe
    from .evaluate import pre_edit_snapshot
    from .models import load_model
    from .requests import load_requests
    from .session import check_fits

    all_reqs = load_requests(s.requests)
    if len(all_reqs) < s.offset + s.n_edits:
        raise ConfigError(f"only {len(all_reqs)} requests for {s.n_edits} edits after the first {s.offset}",
                          where="--offset" if s.offset else "--n",
                          fix="pass fewer edits, a smaller --offset or a larger --requests file")
    lm = load_model(s.model_dir)
    first = s.offset + s.n_edits
    edits, probes = all_reqs[s.offset:first], all_reqs[first:first + s.probe]
    check_fits(lm, edits + probes, subjects=False)  # an edit refused alone is recorded, unapplied
    tok = lm.tokenizer
    ability = None
    if s.ppl_tokens:
        ability = AbilityProbe(lm.model, tok, lm.family, s.layer, AbilityConfig(ppl_tokens=s.ppl_tokens))
    return Baseline(lm, edits, probes, {r.case_id: pre_edit_snapshot(lm.model, tok, r) for r in edits + probes},
                    {k: v.detach().clone() for k, v in lm.model.named_parameters()},
                    lm.family.mlp_out.format(s.layer), probe_true_acc(lm.model, tok, probes), ability,
                    ability.perplexity_pre if ability is not None else float("nan"))


def restore_unedited(base: Baseline) -> None:
    """Put every parameter that differs from the unedited model back (bit-exact), so the next row
    starts from the unedited model even if a row's undo did not restore it."""
    with torch.no_grad():
        for k, p in base.lm.model.named_parameters():
            if not torch.equal(p, base.base_params[k]):
                p.copy_(base.base_params[k])


def checkpoint_row(base: Baseline, done: int, applied_ids: set[str], weight: torch.Tensor) -> dict:
    """The table row after ``done`` edits (``applied_ids``: the case ids applied so far)."""
    from .evaluate import aggregate, score_request

    model, tok = base.lm.model, base.lm.tokenizer
    scores = [score_request(model, tok, r, base.pre[r.case_id]) for r in base.edits[:done]]
    agg = aggregate(scores)
    kept = [sc for sc, r in zip(scores, base.edits) if r.case_id in applied_ids]
    probe = [score_request(model, tok, r, base.pre[r.case_id]) for r in base.probes]
    w0 = base.base_params[base.module + ".weight"]
    ppl = base.ability.perplexity() if base.ability is not None else float("nan")
    return {"edits": done, "applied": len(applied_ids),
            "efficacy_acc": agg["efficacy_acc"], "efficacy_prob": agg["efficacy_prob"],
            "retention_applied_acc": aggregate(kept)["efficacy_acc"] if kept else float("nan"),
            "generalization_acc": agg["generalization_acc"], "locality_acc": agg["locality_acc"],
            "probe_locality_acc": aggregate(probe)["locality_acc"] if probe else float("nan"),
            "probe_true_acc": probe_true_acc(model, tok, base.probes),
            "perplexity": ppl, "perplexity_change_pct": 100.0 * (ppl / base.perplexity - 1.0),
            "weight_drift": float((weight.detach() - w0).float().norm() / w0.float().norm())}


def edit_record(i: int, req, outcome, applied: bool, interference: dict) -> dict:
    """The per-edit record of edit ``i`` (1-based): outcome, clamp used, costs and interference."""
    cfg = outcome.config or {}
    return {"edit": i, "case_id": req.case_id, "applied": applied, "succeeded": bool(outcome.succeeded),
            "status": outcome.status, "clamp_norm_factor": cfg.get("clamp_norm_factor"),
            "ladder_tries": cfg.get("ladder_tries"), "loss_evals": outcome.loss_evals,
            "wall_s": outcome.wall_time, **interference}


@dataclass
class RowState:
    """What a row has done so far: the per-edit records, the checkpoint rows, the case ids applied,
    the applied edits' factors by journal id (for the undo check's independent rebuild) and the
    interference tracker."""

    records: list[dict] = field(default_factory=list)
    rows: list[dict] = field(default_factory=list)
    applied_ids: set[str] = field(default_factory=set)
    factors: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    tracker: InterferenceTracker = field(default_factory=InterferenceTracker)


def edit_step(session, req, i: int, force: bool, st: RowState) -> None:
    """Edit ``req`` (the ``i``-th, 1-based) on the model as it stands; record it with its
    interference against the applied edits before it; apply and journal it when it succeeded (or
    ``force``)."""
    from .methods.common import applies
    from .session import written_parts

    out, parts = written_parts(session, req, session.edit(req), force)
    applied = applies(out, force)
    st.records.append(edit_record(i, req, out, applied, st.tracker.measure(out.u, out.w, out.key)))
    if not applied:
        log.info("edit %s missed its success criterion (%s); not applied", req.case_id, out.status)
        return
    for part in parts:  # one part, or one per layer of a spread edit (lowest first)
        session.apply(req, part)
        st.factors[session.journal.entries()[-1].id] = (part.u.detach().clone(), part.w.detach().clone())
    st.tracker.add(out.u, out.w, out.key)  # the interference figures are the edit layer's
    st.applied_ids.add(req.case_id)


def batch_step(session, reqs: list, first: int, index: int, force: bool, st: RowState) -> None:
    """Edit ``reqs`` (edits ``first``, ``first`` + 1, …) as batch ``index`` (:func:`mobiedit.batch.edit_batch`:
    each searched alone, one solve); record each with its interference against the applied edits
    before the batch and the batch members before it; journal ids as :func:`edit_step` keeps them."""
    from .batch import edit_batch

    recs = edit_batch(session, reqs, index, force)
    applied = [r for r in recs if r.applied]
    ids = [e.id for e in session.journal.entries()[-len(applied):]] if applied else []
    by_case = dict(zip((r.request.case_id for r in applied), ids))
    for i, rec in enumerate(recs, first):
        out = rec.outcome
        st.records.append(edit_record(i, rec.request, out, rec.applied, st.tracker.measure(out.u, out.w, out.key))
                          | {"batch": index})
        if rec.applied:
            st.factors[by_case[rec.request.case_id]] = (out.u.detach().clone(), out.w.detach().clone())
            st.tracker.add(out.u, out.w, out.key)
            st.applied_ids.add(rec.request.case_id)


def checkpoint_step(base: Baseline, st: RowState, done: int, weight: torch.Tensor) -> None:
    """Append the checkpoint row after ``done`` edits, with the summary of the edits since the last one."""
    first = st.rows[-1]["edits"] + 1 if st.rows else 1
    st.rows.append(checkpoint_row(base, done, st.applied_ids, weight) | {"window": window_summary(st.records, first, done)})
    log.info("checkpoint %s", st.rows[-1])


def run_row(base: Baseline, cfg, s: SeqSettings, label: str = "row", progress: bool = False,
            work: str | Path | None = None, batch: int = 1,
            on_checkpoint: Callable[[dict], None] | None = None, identity: dict | None = None) -> dict:
    """Edit ``base.edits`` sequentially with ``cfg`` (see the module docstring) from the unedited
    model, then check undo; return the table, the per-edit records and the undo check. The model is
    left unedited when the undo succeeds (:func:`restore_unedited` makes sure before the next row).
    ``work``: keep the journal in ``work/journal`` (an absent or empty folder), else a temporary one.
    ``progress``: a bar over the edits on stderr, labelled ``label``. ``batch`` > 1: batches of that
    many edits, one solve each (:func:`batch_step`); a checkpoint falls at the end of its batch.
    ``on_checkpoint(partial)``: after each checkpoint but the last, the result so far
    (:func:`row_result` with ``partial`` True and no undo check) — a long row's figures are kept
    when it is stopped before its end. ``identity`` (the row's, with ``work``): save the resume
    state after every edit and resume from the one ``work`` holds (:mod:`mobiedit.sequential_resume`)."""
    from .journal import Journal, apply_factors
    from .sequential_resume import restore_row, save_state
    from .session import EditSession, check_fits, prepare

    t0 = time.perf_counter()
    saved = _saved_state(work, identity)
    lm, st = base.lm, RowState()
    tmp = None if work else tempfile.TemporaryDirectory(prefix="mobiedit-seq-")
    try:
        journal = Journal.open(Path(work or tmp.name) / "journal")
        ctx = prepare(lm, cfg, s.seed, progress=progress)
        check_fits(lm, base.edits, ctx, subjects=False)  # with the context templates' length
        session = EditSession.open(lm, cfg, ctx, journal)
        weight = session.weight(cfg.layer)
        start = 0
        if saved is not None:
            restore_row(saved, session, journal, st)
            start, t0 = saved.done, t0 - saved.elapsed
            log.log(NOTICE, "row %s: resumed after edit %d of %d from %s", label, saved.done, len(base.edits), work)
        with tqdm(total=len(base.edits), initial=start, desc=label, unit="edit", disable=not progress) as bar:
            for index, first in enumerate(range(0, len(base.edits), batch)):
                if first < start:
                    continue
                chunk = base.edits[first:first + batch]
                if batch == 1:
                    edit_step(session, chunk[0], first + 1, s.force, st)
                else:
                    batch_step(session, chunk, first + 1, index, s.force, st)
                done = first + len(chunk)
                bar.update(len(chunk))
                bar.set_postfix(applied=len(st.applied_ids), refresh=False)
                if any(first < m <= done for m in s.marks):
                    checkpoint_step(base, st, done, weight)
                    if on_checkpoint is not None and done < len(base.edits):
                        on_checkpoint(row_result(base, cfg, s, st, None, time.perf_counter() - t0))
                if work is not None and identity is not None:
                    save_state(Path(work), identity, done, len(journal.entries()), st, ctx.edited_keys,
                               time.perf_counter() - t0)
        undo = undo_check(lm.model, lm.family, journal, base, st.factors, s.n_undo, s.seed, apply_factors)
    finally:
        if tmp is not None:
            tmp.cleanup()
    return row_result(base, cfg, s, st, undo, time.perf_counter() - t0)


def _saved_state(work: str | Path | None, identity: dict | None):
    """The resume state ``work`` holds for a row of ``identity`` (None: a new or empty folder).

    Raises:
        ConfigError: ``work`` holds files but no resume state (``where="--work"``), or one of another row.
    """
    from .sequential_resume import STATE_FILE, load_state

    if work is None or not Path(work).exists() or not any(Path(work).iterdir()):
        return None
    saved = load_state(Path(work), identity) if identity is not None else None
    if saved is None:
        raise ConfigError(f"{work} is not empty and holds no {STATE_FILE} to resume from", where="--work",
                          fix="choose a new or empty folder for the journals")
    return saved


def row_result(base: Baseline, cfg, s: SeqSettings, st: RowState, undo: dict | None, wall: float) -> dict:
    """A row's result: its settings, the checkpoint table and per-edit records so far, the undo
    check (None: the row is not finished, and the result says ``partial``)."""
    from .config_io import to_dict

    return {"method": _method(cfg), "config": to_dict(cfg), "layer": cfg.layer,
            "model": str(s.model_dir), "n_edits": s.n_edits, "force": s.force, "seed": s.seed,
            "probe_requests": len(base.probes), "probe_true_acc_unedited": base.probe_true,
            "perplexity_unedited": base.perplexity, "table": list(st.rows), "edits": list(st.records), "undo": undo,
            "wall_seconds": wall, **({"partial": True} if undo is None else {})}


def _method(cfg) -> str:
    """The method name of ``cfg``."""
    from .methods import method_name

    return method_name(cfg)


def undo_check(model, fam, journal, base: Baseline, factors: dict, n_undo: int, seed: int, apply_factors) -> dict:
    """Undo ``n_undo`` random edits one by one, then all; compare against an independent rebuild
    (``base``'s weight snapshot plus ``factors`` of the remaining edits in id order)."""
    rng = random.Random(seed)
    modules = sorted({base.module} | {e.module for e in journal.entries()})  # a spread edit writes several
    active = [e.id for e in journal.entries(active_only=True)]
    order = rng.sample(active, min(n_undo, len(active)))
    exact, others_ok, checks = 0, True, []

    def expected(module: str) -> torch.Tensor:
        w = base.base_params[module + ".weight"].clone()
        for e in journal.entries(active_only=True):
            if e.module == module:
                u, v = factors[e.id]
                w = apply_factors(w, u, v, fam.weight_out_in)
        return w

    def all_exact(want) -> bool:
        return all(torch.equal(model.get_submodule(m).weight.detach(), want(m)) for m in modules)

    def others_untouched() -> bool:
        return all(torch.equal(p, base.base_params[k]) for k, p in model.named_parameters()
                   if k not in {m + ".weight" for m in modules})

    for edit_id in order:
        journal.undo(edit_id, model, fam)
        ok = all_exact(expected)
        exact += int(ok)
        others_ok &= others_untouched()
        checks.append({"undone": edit_id, "bit_exact": ok})
    for e in journal.entries(active_only=True):
        journal.undo(e.id, model, fam)
    restored = all_exact(lambda m: base.base_params[m + ".weight"]) and others_untouched()
    return {"random_undos": len(order), "bit_exact": exact, "other_params_untouched": others_ok,
            "undo_all_restores_unedited_model": restored, "checks": checks}


def undo_ok(result: dict) -> bool:
    """Whether a row's undo check passed: every random undo bit-exact and the full undo restoring."""
    u = result["undo"]
    return u["bit_exact"] == u["random_undos"] and u["undo_all_restores_unedited_model"]
