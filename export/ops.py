"""What a phone does with a bundle — generate, edit, undo — using only the bundle's files.

No HF model is built here: programs run in the bundle's runtime, text goes through
``tokenizers``, and edits are rank-one slots fed from the bundle's journal.

* :func:`run_bundle`: greedy generation with every active journal edit in a slot.
* :func:`edit_bundle`: per request, the ``prefix`` program computes the edit's state (with the
  current slots, so edits compose), :func:`mobiedit.driver.search_value` (the search every host
  runs) searches the value delta through the ``edit`` program, and ROME's factors ``u = v* − W k``, ``w = C⁻¹k̄ / (k·C⁻¹k̄)`` (keys from
  the prefix program, C⁻¹ from keystats; with the manifest's ``edit.update.rule`` ``rows``, the
  direction that is exact at every rewrite row's key; ``protect`` / ``rows-protect`` hold the active
  edits' journaled keys still, :func:`mobiedit.editing.update.bundle_direction`) are appended to the
  journal atomically, with the edit's key k̄.
* :func:`undo_bundle_edit`: marks a journal edit undone (its slot empties on the next run).
"""
from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from mobiedit.driver import search_value
from mobiedit.errors import BundleError
from mobiedit.families import FAMILIES
from mobiedit.journal import Journal, JournalEntry
from mobiedit.journal_lock import DEFAULT_TIMEOUT, journal_lock
from mobiedit.ladder import climb, needs_ladder, sequential_ladder, warm_start
from mobiedit.prompts import request_refusal
from mobiedit.requests import EditRequest
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs
from mobiedit.editing.update import PROTECTING_RULES, bundle_direction
from mobiedit.recipes import EditRecipe, SuccessCriterion, check_fraction, check_nll, search_record
from mobiedit.zo import ZOConfig
from mobiedit.zo.rank_one import rank_one_factors

from .bundle import JOURNAL, Bundle, load_bundle
from .manifest_check import update_of
from .generate import CacheShape, greedy_tokens
from .packing import EDIT_INPUTS, edit_feed, pack_edit
from .recipe import Recipe, recipe_of
from .verify import EditGraph, edit_shapes_of, lost_edits, says_rule, written_holds

log = logging.getLogger(__name__)

METHOD = "mobiedit-bundle"


def _open(bundle: Bundle | str | Path) -> Bundle:
    return bundle if isinstance(bundle, Bundle) else load_bundle(bundle)


def prompt_ids(bundle: Bundle | str | Path, prompt: str, chat: bool | None = None) -> list[int]:
    """Token ids the bundle is prompted with: ``prompt`` as plain text, or as the user turn of the
    bundle's chat template (``chat``: True / False / None = the manifest's default, see :mod:`.chat`)."""
    from .chat import chat_prompt_text, use_chat

    if not prompt.strip():
        raise BundleError("the prompt is empty" if not prompt else "the prompt is only whitespace", where="prompt",
                          fix="give the text to continue (a question for a chat bundle)")
    b = _open(bundle)
    tok = b.tokenizer()
    if not use_chat(b.manifest, chat):
        return tok(prompt)["input_ids"]
    special = {k: tok.token(v) for k, v in b.manifest["special_tokens"].items()}
    return tok(chat_prompt_text(b.path, b.manifest, prompt, special), add_special_tokens=False)["input_ids"]


def bundle_tokens(bundle: Bundle | str | Path, prompt: str, max_new_tokens: int = 32, chat: bool | None = None
                  ) -> list[int]:
    """Greedy continuation ids of ``prompt`` (active journal edits applied through the slots)."""
    b = _open(bundle)
    m, dims = b.manifest, b.manifest["dims"]
    shape = CacheShape(dims["num_layers"], dims["num_kv_heads"], m["shapes"]["max_seq_len"], dims["head_dim"],
                       m["shapes"]["prefill_chunk"])
    u, w = b.slots()
    ids = prompt_ids(b, prompt, chat)
    return greedy_tokens(b.program("prefill"), b.program("decode"), ids, max_new_tokens, shape, u, w,
                         eos_id=m["special_tokens"].get("eos"))


def run_bundle(bundle: Bundle | str | Path, prompt: str, max_new_tokens: int = 32, chat: bool | None = None) -> str:
    """Generate greedily from the bundle alone; returns the continuation text (``chat``: see
    :func:`prompt_ids`)."""
    b = _open(bundle)
    return b.tokenizer().decode(bundle_tokens(b, prompt, max_new_tokens, chat))


@dataclass
class BundleEditResult:
    """One request's outcome. ``entry`` is the journal entry when the edit was applied."""

    request: EditRequest
    status: str
    succeeded: bool
    applied: bool
    entry: JournalEntry | None
    loss_evals: int
    wall_time: float
    final_loss: float | None
    losses: list[float]
    loop_succeeded: bool | None = None  # the search's verdict; ``succeeded`` is the written edit's
    repair_of: int | None = None  # the earlier edit this one re-teaches (``repair``), else None
    written_refused: int = 0  # deltas the loop's rule passed but whose written edit did not hold (stop_on "written")


def _check_edit_interface(b: Bundle) -> None:
    """Refuse, before anything runs, an edit program whose inputs this host does not feed."""
    spec = b.manifest["programs"].get("edit") or {}
    unknown = [n for n in spec.get("inputs", []) if n not in EDIT_INPUTS]
    if unknown or "kl_suffix_index" not in spec.get("inputs", []):
        raise BundleError(f"the edit program takes inputs {unknown or spec.get('inputs')} this mobiedit does not "
                          f"feed (it feeds {list(EDIT_INPUTS)})", where=f"{b.path / 'manifest.json'}, field "
                          "'programs.edit.inputs'", fix="re-export the bundle with this version of mobiedit")


@dataclass
class BundleSearch:
    """One request's value search through the bundle's programs (nothing written yet)."""

    status: str
    succeeded: bool
    u: np.ndarray
    w: np.ndarray
    loss_evals: int
    zo: ZOConfig
    losses: list[float]
    loop_succeeded: bool | None = None  # the search's own verdict (its stop signal); None: not verified
    delta: torch.Tensor | None = None  # the searched value change (a clamp ladder's next start)
    confirms: int = 0  # written-edit checks the search asked for (stop_on "written")
    refused: int = 0  # of those, deltas the loop's rule passed but whose written edit did not hold
    key: torch.Tensor | None = None  # k̄ of the rewrite rows (journaled: the protecting rules hold it still)


def search_bundle_edit(b: Bundle, journal: Journal, keystats: dict, req: EditRequest, zo: ZOConfig | None = None,
                       success_fraction: float | None = None, success_nll: float | None = None,
                       backend: str = "native", verify_write: bool = True, clamp: float | None = None,
                       start: torch.Tensor | None = None, stop_on: str | None = None) -> BundleSearch:
    """Search ``req``'s value delta through the bundle's prefix + edit programs (the journal's
    active edits in the slots) and compute ROME's factors; writes nothing. ``zo`` and the success
    thresholds default to the bundle's recipe (:func:`~mobiedit.export.recipe.recipe_of`), ``clamp``
    to the manifest objective's ``clamp_norm_factor``; ``start``: the delta the search starts from
    (a clamp ladder's earlier rung; None: zero). ``succeeded`` is the verdict of the programs with
    the factors in a slot (:func:`~mobiedit.export.verify.written_holds`), the search's own in
    ``loop_succeeded``. ``stop_on`` (default: the recipe's, :data:`~mobiedit.recipes.STOP_ON`):
    ``"written"`` makes that written verdict the search's stop (the driver's ``confirm``)."""
    m = b.manifest
    recipe_m = recipe_of(m)
    zo, success_fraction, success_nll = _resolve(recipe_m, zo, success_fraction, success_nll)
    stop_on = stop_on or recipe_m.stop_on
    recipe = EditRecipe(zo, SuccessCriterion(success_fraction, success_nll), recipe_m.settle)
    objective = ObjectiveConfig(**m["edit"]["objective"])
    if clamp is not None:
        objective = dataclasses.replace(objective, clamp_norm_factor=float(clamp))
    inputs = build_edit_inputs(b.tokenizer(), req, m["edit"]["templates"], objective)
    packed = pack_edit(inputs, edit_shapes_of(m), objective)
    slot_u, slot_w = b.slots(journal)
    pout = b.program("prefix").run({**packed.prefix_feed, "slot_u": slot_u, "slot_w": slot_w})
    graph = EditGraph(b.program("edit"), edit_feed(packed, pout), m["shapes"]["edit_K"], packed)
    v_init = pout["values"][0]
    keys = pout["keys"]
    upd = update_of(m)
    prior = b.protected_keys(journal) if upd.rule in PROTECTING_RULES else None
    c = bundle_direction(keystats["c_inv"], keys[: packed.n_rewrite], upd.rule, upd.rows_ridge, prior,
                         upd.edited_weight)
    says = says_rule(packed, success_fraction)
    verdicts: dict[bytes, bool | None] = {}  # the written verdict per delta checked (the last one is reused)

    def written(delta: torch.Tensor) -> bool | None:
        key = delta.numpy().tobytes()
        if key not in verdicts:
            u, w = rank_one_factors(keys[0].numpy(), (v_init + delta).numpy(), v_init.numpy(), c.numpy())
            verdicts[key] = written_holds(b, packed, slot_u, slot_w, u, w, says)
        return verdicts[key]

    confirm = (lambda delta: written(delta) is not False) if verify_write and stop_on == "written" else None
    found = search_value(graph, v_init, objective, recipe, backend, start=start, confirm=confirm)
    u, w = rank_one_factors(keys[0].numpy(), (v_init + found.delta).numpy(), v_init.numpy(), c.numpy())
    held = written(found.delta) if verify_write else None
    counts = {"confirms": found.confirms, "refused": found.refused, "key": keys[: packed.n_rewrite].mean(0)}
    if held is None:
        return BundleSearch(found.status, found.succeeded, u, w, found.evals, found.zo, found.losses, delta=found.delta,
                            **counts)
    return BundleSearch(found.status, held, u, w, found.evals, found.zo, found.losses,
                        loop_succeeded=found.succeeded, delta=found.delta, **counts)


def climb_bundle_edit(b: Bundle, journal: Journal, keystats: dict, req: EditRequest, zo: ZOConfig,
                      success_fraction: float, success_nll: float, backend: str, ladder: tuple[float, ...],
                      warm: bool = False, stop_on: str | None = None) -> tuple[BundleSearch, dict]:
    """:func:`search_bundle_edit` once (``ladder`` empty: the manifest's clamp), or climbing the
    clamp ladder (:func:`mobiedit.ladder.climb`; ``warm``: a rung starts from the previous rung's
    delta, :func:`mobiedit.ladder.warm_start`, else from zero as the eager default). Returns the last
    search, with every rung's evaluations, losses and written-edit checks summed in, and what the
    journal records of the ladder. ``stop_on``: :func:`search_bundle_edit`'s."""
    if not ladder:
        return search_bundle_edit(b, journal, keystats, req, zo, success_fraction, success_nll, backend,
                                  stop_on=stop_on), {}

    def attempt(factor: float, start: torch.Tensor | None) -> BundleSearch:
        return search_bundle_edit(b, journal, keystats, req, zo, success_fraction, success_nll, backend,
                                  clamp=factor, start=start, stop_on=stop_on)

    rungs = climb(ladder, attempt, lambda f: f.succeeded,
                  lambda f: warm_start(f.delta, f.loop_succeeded) if warm else None)
    last = rungs[-1]
    found = dataclasses.replace(last.result, loss_evals=sum(r.result.loss_evals for r in rungs),
                                losses=[x for r in rungs for x in r.result.losses],
                                confirms=sum(r.result.confirms for r in rungs),
                                refused=sum(r.result.refused for r in rungs))
    return found, {"clamp_norm_factor": last.factor, "ladder_tries": len(rungs), "ladder_warm": last.warm}


def _resolve(recipe: Recipe, zo: ZOConfig | None, success_fraction: float | None, success_nll: float | None
             ) -> tuple[ZOConfig, float, float]:
    """The search and thresholds to use: each given value, else the recipe's."""
    return (zo or recipe.zo, recipe.success_fraction if success_fraction is None else success_fraction,
            recipe.success_nll if success_nll is None else success_nll)


def _edit_one(b: Bundle, recipe: Recipe, journal: Journal, keystats: dict, req: EditRequest, zo: ZOConfig,
              success_fraction: float, success_nll: float, force: bool, backend: str,
              clamp_ladder: tuple[float, ...] | None, warm: bool = False, repair_of: int | None = None,
              stop_on: str | None = None) -> BundleEditResult:
    t0 = time.perf_counter()
    m = b.manifest
    if clamp_ladder is None:  # the recipe's ladder once the bundle carries or will carry from_edits edits
        n = len(journal.entries(active_only=True)) + 1
        clamp = ObjectiveConfig(**m["edit"]["objective"]).clamp_norm_factor
        needed = needs_ladder(n, recipe.ladder_from_edits)
        clamp_ladder = sequential_ladder(clamp, recipe.ladder) if needed else ()
    stop_on = stop_on or recipe.stop_on
    found, ladder = climb_bundle_edit(b, journal, keystats, req, zo, success_fraction, success_nll, backend,
                                      clamp_ladder, warm, stop_on)
    succeeded, u, w, zcfg = found.succeeded, found.u, found.w, found.zo
    hist = found.losses
    entry = None
    if succeeded or force:
        module = m["edit_module"]
        prior = [e for e in journal.entries() if e.module == module]
        base = journal.rebuild(module) if prior else keystats["base_weight"]
        entry = journal.record(req, METHOD, m["model_family"], m["edit_layer"], module, torch.from_numpy(u),
                               torch.from_numpy(w), base,
                               metrics={"status": found.status, "succeeded": succeeded,
                                        "loop_succeeded": found.loop_succeeded, "loss_evals": found.loss_evals,
                                        "final_loss": hist[-1] if hist else None,
                                        "written_checks": found.confirms, "written_refused": found.refused},
                               config={**search_record(zcfg, success_fraction, success_nll, recipe.settle),
                                       "stop_on": stop_on, "runtime": b.runtime, **ladder,
                                       **({"repair_of": repair_of} if repair_of is not None else {})},
                               key=found.key)
    log.info("bundle edit %s: %s (applied=%s, %d evals)", req.case_id, found.status, entry is not None, found.loss_evals)
    return BundleEditResult(request=req, status=found.status, succeeded=succeeded, applied=entry is not None,
                            entry=entry, loss_evals=found.loss_evals, wall_time=time.perf_counter() - t0,
                            final_loss=hist[-1] if hist else None, losses=hist, loop_succeeded=found.loop_succeeded,
                            repair_of=repair_of, written_refused=found.refused)


#: recorded repairs per edit at most (a fact lost again after this many is left lost)
MAX_REPAIRS = 2


def repair_target(entry: JournalEntry) -> int | None:
    """The id of the edit ``entry`` re-teaches (config ``repair_of``), None when it is not a repair."""
    return (entry.config or {}).get("repair_of")


def repairs_of(journal: Journal, edit_id: int, active_only: bool = True) -> list[JournalEntry]:
    """The journal entries that re-teach edit ``edit_id`` (config ``repair_of``)."""
    return [e for e in journal.entries(active_only=active_only) if repair_target(e) == edit_id]


def superseded(journal: Journal, entry: JournalEntry) -> bool:
    """Whether a later active edit asks the same question (same subject and prompt) with another
    answer: the user replaced the fact, so losing it is intended, not a loss to repair."""
    def question(e: JournalEntry) -> tuple:
        return e.request.get("subject"), e.request.get("prompt")

    return any(e.id > entry.id and question(e) == question(entry)
               and e.request.get("target_new") != entry.request.get("target_new")
               for e in journal.entries(active_only=True))


def _repair(b: Bundle, recipe: Recipe, journal: Journal, keystats: dict, zo: ZOConfig, success_fraction: float,
            success_nll: float, backend: str, clamp_ladder: tuple[float, ...] | None, warm: bool,
            just_made: int, stop_on: str | None = None) -> list[BundleEditResult]:
    """Re-teach every earlier edit whose fact the bundle no longer says after edit ``just_made``
    (:func:`~mobiedit.export.verify.lost_edits`; repairs themselves are not rechecked, their
    original is): a new search of its request under the current slots, recorded as a new entry
    (config ``repair_of``) only when its written edit holds. The earlier entry stays — the repair
    was solved with it in place. At most :data:`MAX_REPAIRS` recorded repairs per edit; none
    when the slots are full; none for a fact a later edit replaced (:func:`superseded`)."""
    skip = {just_made} | {e.id for e in journal.entries(active_only=True) if repair_target(e) is not None}
    out = []
    for lost in lost_edits(b, journal, success_fraction, skip):
        if len(repairs_of(journal, lost.id)) >= MAX_REPAIRS or superseded(journal, lost):
            continue
        if len(journal.entries(active_only=True)) >= b.manifest["slots"]:
            log.warning("edit %d is lost but every slot is taken: not repaired", lost.id)
            break
        res = _edit_one(b, recipe, journal, keystats, lost.edit_request(), zo, success_fraction, success_nll, False,
                        backend, clamp_ladder, warm, repair_of=lost.id, stop_on=stop_on)
        log.info("repair of edit %d (%s): %s", lost.id, lost.edit_request().case_id, "applied" if res.applied else
                 "not applied")
        out.append(res)
    return out


def edit_bundle(bundle: Bundle | str | Path, requests: list[EditRequest], zo: ZOConfig | None = None, *,
                success_fraction: float | None = None, success_nll: float | None = None, force: bool = False,
                backend: str = "native", lock_timeout: float = DEFAULT_TIMEOUT,
                clamp_ladder: tuple[float, ...] | None = None, warm_ladder: bool = False,
                repair: bool = False, stop_on: str | None = None) -> list[BundleEditResult]:
    """Edit ``requests`` one after another through the bundle's prefix + edit programs.

    The search (``zo``) and the success thresholds default to the bundle's recipe (manifest
    ``recipe``, :func:`~mobiedit.export.recipe.recipe_of`). Each applied edit is journaled before
    the next request starts (so it sits in a slot for the next prefix run). An edit that misses the
    success criterion (``mobiedit.editing.objective.edit_holds`` with ``success_fraction``, and the
    loss minus decay at most ``success_nll``, as ``mobiedit_edit``) within budget is not applied
    unless ``force``. ``clamp_ladder`` (clamp factors, smallest first; ``()``: the manifest's clamp
    only) defaults to the recipe's ladder (``recipe.ladder.fractions`` × the manifest's clamp,
    :func:`mobiedit.ladder.sequential_ladder`) whenever the bundle will carry at least
    ``recipe.ladder.from_edits`` edits (journal's active edits + this one), as a sequential
    eager session does (:func:`mobiedit.session.sequential_config`); ``warm_ladder`` starts each rung
    from the previous rung's delta (``update.ladder_warm_start``, off by default). With ``repair``,
    after each applied edit every earlier edit the bundle no longer says is re-taught
    (:func:`_repair`); its results follow the request's in the returned list, ``repair_of`` set.
    ``stop_on`` (default: the recipe's ``success.stop_on``): ``"written"`` stops each search only
    where its written edit holds (:func:`search_bundle_edit`), ``"loop"`` on the loop's rule.
    Raises BundleError when a request does not fit the programs' shapes, NumericalError on NaN/Inf,
    RequestError (before any search) for a subject at its prompt's first token
    (:func:`mobiedit.prompts.subject_context_error`).

    Each request holds the journal's write lock (:func:`mobiedit.journal_lock.journal_lock`) from
    re-reading the journal to its last write, so concurrent writers (another ``edit --bundle``, an
    undo, the app) are serialised: no id is reused and no edit is lost. A writer that cannot take
    the lock within ``lock_timeout`` seconds raises ``JournalBusyError``.
    """
    if success_fraction is not None:
        check_fraction(success_fraction, "success_fraction")
    if success_nll is not None:
        check_nll(success_nll, "success_nll")
    b = _open(bundle)
    _check_edit_interface(b)
    keystats = b.keystats()
    recipe = recipe_of(b.manifest)
    zo, success_fraction, success_nll = _resolve(recipe, zo, success_fraction, success_nll)
    tok = b.tokenizer()
    for err in (request_refusal(tok, r) for r in requests):  # before any search, as an eager edit
        if err is not None:
            raise err
    results = []
    for r in requests:
        with journal_lock(b.path / JOURNAL, lock_timeout):
            journal = b.journal()  # re-read under the lock: another writer may have changed it
            res = _edit_one(b, recipe, journal, keystats, r, zo, success_fraction, success_nll, force, backend,
                            clamp_ladder, warm_ladder, stop_on=stop_on)
            results.append(res)
            if repair and res.applied:
                results += _repair(b, recipe, journal, keystats, zo, success_fraction, success_nll, backend,
                                   clamp_ladder, warm_ladder, res.entry.id, stop_on)
    return results


def _holder(module: str, weight: torch.Tensor) -> torch.nn.Module:
    """A module tree holding one weight at ``module`` (what Journal.undo updates)."""
    root = cur = torch.nn.Module()
    *parents, leaf = module.split(".")
    for name in parents:
        child = torch.nn.Module()
        cur.add_module(name, child)
        cur = child
    end = torch.nn.Module()
    end.weight = torch.nn.Parameter(weight.clone(), requires_grad=False)
    cur.add_module(leaf, end)
    return root


def undo_bundle_edit(bundle: Bundle | str | Path, edit_id: int, lock_timeout: float = DEFAULT_TIMEOUT
                     ) -> JournalEntry:
    """Mark ``edit_id`` undone in the bundle's journal, and its active repairs (entries with
    config ``repair_of`` = ``edit_id``, :func:`edit_bundle`'s ``repair``: they re-teach the same
    fact, so undoing the edit undoes them); the next run leaves their slots empty. Returns the
    entry of ``edit_id``. Holds the journal's write lock (see :func:`edit_bundle`)."""
    b = _open(bundle)
    with journal_lock(b.path / JOURNAL, lock_timeout):
        journal = b.journal()
        entry = journal.entry(edit_id)
        for e in [*repairs_of(journal, edit_id), entry]:
            holder = _holder(e.module, journal.rebuild(e.module))
            done = journal.undo(e.id, holder, FAMILIES[e.family])
        return done
