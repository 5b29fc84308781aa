"""The value-search driver: one definition of how a forward-only edit searches its value delta.

Every host of the search calls :func:`search_value` on its own :class:`EditGraph`: the eager
method (:func:`mobiedit.methods.mobiedit.mobiedit_edit`, over
:class:`~mobiedit.forward.graph.PrefixGraph` / :class:`~mobiedit.forward.graph.FullGraph`) and
the bundle path (:func:`mobiedit.export.ops.search_bundle_edit`, over the bundle's ``edit``
program). The driver

* searches in normalised units ``z = δ / s``, ``s = ‖v_init‖/√d``, so that ``h``, ``lr`` and the
  clamp ``‖z‖ ≤ clamp_norm_factor·√d`` mean the same on every model;
* feeds the ZO loop (:func:`mobiedit.zo.run_zo`) a ``forward`` callback (K deltas → K losses) and,
  with ``early_stop``, a ``check`` callback — the success rule :func:`success_holds`;
* with ``confirm`` (the written verdict as the stop, :func:`search_value`), stops only where the
  delta's *written* edit also holds — the loop's rule is then a gate before the host's verify;
* with ``reuse_checked``, does not evaluate a point twice: with the check after the update
  (``zo.check_at`` "update"), the next step's base row (FZOO's row 0 is the checked delta) takes
  the check's loss — one evaluation a step fewer, the same search (the loss is the same row's,
  batched differently: equal to float rounding); with ``check_at`` "base", the check of the
  step's evaluated point reads that step's row 0 — no evaluation, and on a static-batch graph (a
  bundle's edit program) no program call;
* with ``recipe.settle`` (:class:`~mobiedit.recipes.Settle`, off by default), after the first
  success shrinks the delta and searches again, keeping a shorter delta that still passes
  (:func:`settle_value`; the app's ``SettlePhase`` is the same phase);
* raises :class:`~mobiedit.errors.NumericalError` on NaN/Inf (``raise_for_status``), and when the
  loop did not stop on success, checks its final delta once;
* returns the delta in model units with the loop's verdict and what the search cost.

The rank-one factors are not computed here: the hosts take their keys from different graphs
(the float model, the bundle's prefix program).
"""
from __future__ import annotations

import dataclasses
import logging
import math
from dataclasses import dataclass
from typing import Callable, Protocol

import numpy as np
import torch

from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.objective import edit_holds, full_rows, within_margin
from mobiedit.recipes import EditRecipe, Settle, SuccessCriterion
from mobiedit.zo import ZOConfig, run_zo
from mobiedit.zo.estimators import distinct_rows_per_step
from mobiedit.zo.optim import clamp_norm

__all__ = ["EditGraph", "ValueSearch", "success_holds", "search_value", "settle_value"]

log = logging.getLogger(__name__)

#: ``on_step(calls, loss)``: after each forward batch, the graph calls so far and the batch's lowest loss
StepFn = Callable[[int, float], None]
#: ``confirm(delta)``: whether the edit written from ``delta`` [d] (model units) holds — the host's
#: verify after write, asked only where the loop's own rule already passed
ConfirmFn = Callable[[torch.Tensor], bool]


class EditGraph(Protocol):
    """K value deltas in, K losses and per-row target counts out — no autograd.

    ``graph(deltas [K, d] float32, model units) -> (losses [K], correct [K, n_rewrite])``:
    ``losses[k]`` is the objective of :mod:`mobiedit.editing.objective` at ``deltas[k]``;
    ``correct[k, b]`` counts the target tokens of rewrite row ``b`` that are the teacher-forced
    argmax — a sum of 0/1 terms, exact in float32, so row ``b`` shows the whole target iff
    ``correct[k, b] == target_len`` (:func:`~mobiedit.editing.objective.full_rows`).
    """

    n_rows: int      # prompt rows one delta runs (rewrite rows + KL rows)
    n_rewrite: int   # rewrite rows: the plain prompt (row 0) and its context-templated variants
    target_len: int  # target tokens per rewrite row

    def __call__(self, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]: ...


def success_holds(loss: float, correct: torch.Tensor, target_len: int, delta_norm: float, v_init_norm: float,
                  objective: ObjectiveConfig, success: SuccessCriterion) -> bool:
    """The search's success rule for one delta: :func:`~mobiedit.editing.objective.edit_holds`
    on its rows (``correct`` [n_rewrite] counts; the plain prompt and ``success.fraction`` of the
    rows full) and :func:`~mobiedit.editing.objective.within_margin` (``loss`` minus the decay
    term of ``delta_norm`` at most ``success.nll``)."""
    return (edit_holds(full_rows(correct, target_len), success.fraction)
            and within_margin(loss, delta_norm, v_init_norm, objective, success.nll))


@dataclass
class ValueSearch:
    """One value search's result (nothing written).

    ``delta``: [d] float32 in model units (``z · s``). ``succeeded``: the loop's verdict (stopped
    on success, or its final delta passes the rule). ``holds``: the search graph shows the target at
    ``delta`` (:func:`~mobiedit.editing.objective.edit_holds` alone, without the NLL margin): the
    verdict comparable with the edited model's, which applies that rule. Counters: ``evals`` loss evaluations (a batch
    of K counts K, a check 1); ``distinct_evals`` those at distinct points (the paper's estimator
    proposes x itself n times a step: :func:`~mobiedit.zo.estimators.distinct_rows_per_step`);
    ``sequences`` prompt sequences run (each evaluation's rows: ``evals · n_rows`` unless the steps
    run on a row subset); ``calls`` graph invocations (forward
    batches and checks). ``zo``: the configuration run (``max_norm`` set); ``scale``: ``s``.
    """

    delta: torch.Tensor
    status: str
    succeeded: bool
    holds: bool
    losses: list[float]
    evals: int
    distinct_evals: int
    sequences: int
    calls: int
    zo: ZOConfig
    scale: float
    confirms: int = 0  # ``confirm`` calls (each one a written-edit check of the host's, not a loss evaluation)
    refused: int = 0  # of those, deltas whose written edit did not hold (the loop went on)
    stop_on: str = "loop"  # the stop the search ran: "written" only with a ``confirm`` (recipes.STOP_ON)
    settled: int = 0  # settle rounds kept (recipes.Settle; 0 without the phase)
    found_norm: float = 0.0  # ‖δ‖ (model units) where the search first succeeded, before the settle phase


def _model_units(z: np.ndarray, scale: float) -> torch.Tensor:
    """``z · s`` as a float32 tensor (a new array: the loop's buffers are read-only)."""
    return torch.from_numpy(np.multiply(z, scale, dtype=np.float32))


def start_point(start: torch.Tensor | None, scale: float, max_norm: float, d: int) -> np.ndarray:
    """The loop's ``x0`` [d] float32 in normalised units: ``start / s`` clamped to ``max_norm``
    (zeros without ``start``)."""
    if start is None:
        return np.zeros(d, dtype=np.float32)
    x = (start.detach().double().cpu().reshape(-1) / scale).float().numpy()
    return np.array(clamp_norm(x, max_norm), dtype=np.float32)


def search_value(graph: EditGraph, v_init: torch.Tensor, objective: ObjectiveConfig, recipe: EditRecipe,
                 backend: str = "native", early_stop: bool = True, on_step: StepFn | None = None,
                 start: torch.Tensor | None = None, confirm: ConfirmFn | None = None,
                 step_graph: EditGraph | None = None, reuse_checked: bool = True) -> ValueSearch:
    """Search the value delta that makes ``graph`` show the target (see the module docstring).

    Args:
        graph: the edit's :class:`EditGraph`.
        v_init: [d] the unedited value at the subject (sets the units ``s = ‖v_init‖/√d``).
        objective: the objective's constants (clamp, decay) the graph was built with.
        recipe: the ZO search and the success rule.
        backend: ``"native"`` (C++ engine) or ``"python"`` (reference).
        early_stop: pass the success rule to the loop as its ``check`` (else it runs to a budget).
        on_step: ``on_step(calls, min loss)`` after each forward batch (progress display).
        start: [d] the delta to start from, model units (None: δ = 0); clamped into the ball.
        confirm: the written verdict as the stop (None: the loop's rule alone). Where the rule
            passes at a delta, ``confirm(delta)`` decides: False and the loop goes on (the delta
            met the search graph's rule, but its rank-one write would not say the fact). Then
            ``succeeded`` means the written edit holds, so a host's verify after write agrees.
        step_graph: the graph the loop's steps (the estimator's K deltas) run on, when it is not
            ``graph`` — e.g. :class:`~mobiedit.forward.rows.RowSampledGraph`, a random subset
            of the rewrite rows per step; the success rule always reads ``graph``, every row.
        reuse_checked: a point already scored is not run again — a step's row 0 that the last check
            scored, a check of the last step's row 0; only where the steps run on ``graph`` itself
            (a row-sampled step scores another objective).

    Raises:
        NumericalError: the loop met NaN/Inf.
        ConfigError / MobiEditError: from :func:`mobiedit.zo.run_zo`.
    """
    d = v_init.shape[0]
    v_norm = float(v_init.norm())
    scale = v_norm / math.sqrt(d)
    zcfg = dataclasses.replace(recipe.zo, max_norm=objective.clamp_norm_factor * math.sqrt(d))
    per_batch = distinct_rows_per_step(zcfg.estimator, zcfg.n_dirs)
    n = {"evals": 0, "distinct": 0, "calls": 0, "confirms": 0, "refused": 0}

    stepper = graph if step_graph is None else step_graph
    n["sequences"] = 0

    # the points already scored, (float32 bytes in model units, loss, correct [n_rewrite]): "check" the
    # last check's, "base" the last step's row 0 — kept only where the steps run on ``graph`` itself
    scored: dict[str, tuple[bytes, float, torch.Tensor]] = {}
    reuse = reuse_checked and step_graph is None

    def forward(D: np.ndarray) -> np.ndarray:
        deltas = _model_units(D, scale)
        key0 = deltas[0].numpy().tobytes()
        hit = scored.get("check") if reuse else None
        skip = int(hit is not None and hit[0] == key0)
        run, correct = stepper(deltas[skip:])
        losses = torch.cat([torch.tensor([hit[1]], dtype=run.dtype), run]) if skip else run
        if reuse:
            scored["base"] = hit if skip else (key0, float(run[0]), correct[0])
        n["evals"] += D.shape[0] - skip; n["distinct"] += per_batch - skip; n["calls"] += 1
        n["sequences"] += (D.shape[0] - skip) * stepper.n_rows
        if on_step is not None:  # one batched call of K directions = one step
            on_step(n["calls"], float(losses.min()))
        return losses.double().numpy()

    last = {"holds": False}

    def check(x: np.ndarray) -> bool:
        delta = _model_units(x, scale).view(1, -1)
        key = delta[0].numpy().tobytes()
        known = [hit for hit in (scored.get("base"), scored.get("check")) if hit is not None and hit[0] == key]
        if known:  # the step's own row 0 (check_at "base"), or the point the last check scored
            _, loss0, correct0 = known[0]
        else:
            losses, correct = graph(delta)
            loss0, correct0 = float(losses[0]), correct[0]
            n["evals"] += 1; n["distinct"] += 1; n["calls"] += 1; n["sequences"] += graph.n_rows
        if reuse:
            scored["check"] = (key, loss0, correct0)
        last["holds"] = edit_holds(full_rows(correct0, graph.target_len), recipe.success.fraction)
        passed = last["holds"] and within_margin(loss0, float(delta.norm()), v_norm, objective,
                                                 recipe.success.nll)
        if passed and confirm is not None:
            n["confirms"] += 1
            passed = bool(confirm(delta.view(-1)))
            n["refused"] += not passed
        return passed

    res = run_zo(forward, check if early_stop else None, start_point(start, scale, zcfg.max_norm, d), zcfg,
                 backend=backend)
    res.raise_for_status()
    x = np.asarray(res.x, dtype=np.float32)
    succeeded = res.succeeded or check(x)  # stopped on success: the rule (and so edit_holds) passed at x
    history, norm_found, settled = list(res.history), float(np.linalg.norm(x)) * scale, 0
    if succeeded and early_stop and recipe.settle.rounds:
        x, settled = settle_value(forward, check, x, zcfg, recipe.settle, backend, history)
    return ValueSearch(delta=_model_units(x, scale), status=res.status.value, succeeded=succeeded,
                       holds=succeeded or last["holds"],
                       losses=history, evals=n["evals"], distinct_evals=n["distinct"],
                       sequences=n["sequences"], calls=n["calls"], zo=zcfg, scale=scale,
                       confirms=n["confirms"], refused=n["refused"],
                       stop_on="written" if confirm is not None else "loop",
                       settled=settled, found_norm=norm_found)


def settle_value(forward: Callable[[np.ndarray], np.ndarray], check: Callable[[np.ndarray], bool], x: np.ndarray,
                 zcfg: ZOConfig, settle: Settle, backend: str, history: list[float]) -> tuple[np.ndarray, int]:
    """The settle phase (:class:`~mobiedit.recipes.Settle`) from a passing delta ``x`` [d]
    (normalised units): round ``r`` runs the loop from ``settle.shrink · x`` for at most
    ``settle.steps`` steps under the same ``check`` (seed ``zcfg.seed + r + 1``); its delta is kept if
    it passed and is shorter than ``x``, else the phase ends. Appends the rounds' base losses to
    ``history``; returns the kept delta and how many rounds were kept. Every delta returned passed
    ``check`` (the success rule and, with a ``confirm``, the written edit)."""
    for r in range(settle.rounds):
        cfg = dataclasses.replace(zcfg, max_steps=settle.steps, seed=(zcfg.seed + r + 1) % 2**64)
        res = run_zo(forward, check, np.asarray(x * settle.shrink, dtype=np.float32), cfg, backend=backend)
        res.raise_for_status()
        history.extend(res.history)
        found = np.asarray(res.x, dtype=np.float32)
        if not res.succeeded or np.linalg.norm(found) >= np.linalg.norm(x):
            log.debug("settle round %d: %s, |x| %.3f -> %.3f; phase ends", r + 1, res.status.value,
                      float(np.linalg.norm(x)), float(np.linalg.norm(found)))
            return x, r
        log.debug("settle round %d: |x| %.3f -> %.3f", r + 1, float(np.linalg.norm(x)), float(np.linalg.norm(found)))
        x = found
    return x, settle.rounds
