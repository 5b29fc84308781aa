"""MobiEdit: forward-only value search on a (quantized) static-shape graph with early stopping
and prefix-activation reuse, driven by the ZO loop (native engine by default).

This module builds the edit's graph (:func:`build_graph`) and forward model, runs the search
(:func:`mobiedit.driver.search_value`: normalised units ``z = δ / s``, ``s = ‖v_init‖/√d``, the
clamp, the success rule) and computes the factors on the float model. Defaults:
:data:`mobiedit.recipes.FZOO`.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, field

import torch

from ..driver import search_value
from ..errors import ConfigError
from ..forward.graph import FullGraph, PrefixGraph
from ..forward.prefix import compute_prefix_state
from ..forward.rows import RowSampledGraph
from ..forward.quant import QuantConfig, check_prequantized, is_prequantized, quantized_copy
from ..forward.stream import layers_paged_out
from ..models import LoadedModel
from ..requests import EditRequest
from ..editing.config import ContextConfig, ObjectiveConfig, UpdateConfig, check_mom2_ridge, written_layers
from ..editing.context import EditInputs, build_edit_inputs
from ..recipes import FZOO, EditRecipe, Settle, SuccessCriterion, check_fraction, check_nll, check_stop_on, search_record
from ..zo import ZOConfig
from .common import EditOutcome, ModelContext, module_name, StepFn
from .rome import edit_keys, factors_from_delta, key_model, search_keys
from .verify import WriteCheck, WrittenJudge, written_judge


@dataclass(frozen=True)
class MobiEditConfig:
    """Forward-only editing. ``prefix_reuse``/``early_stop``/``quant`` are the paper's three
    savings and can be switched off one by one for the benchmark rows."""

    layer: int = 1
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    zo: ZOConfig = field(default_factory=lambda: FZOO.zo)  # the shipped recipe (mobiedit.recipes)
    quant: QuantConfig = field(default_factory=QuantConfig)
    prefix_reuse: bool = True
    early_stop: bool = True
    success_fraction: float = FZOO.success.fraction  # editing.objective.edit_holds: plain prompt + this
                                    # share of rows (recipes.SuccessCriterion) ...
    success_nll: float = FZOO.success.nll  # ... and the objective minus its decay term (mean target NLL
                                    # per token + KL) at most this: a margin, like ROME's loss-based stop
    backend: str = "native"
    page_out_lower: bool = True     # forward.stream: with prefix reuse, file-backed weights of
                                    # layers ≤ l leave the resident set after each use (the loop
                                    # never runs them)
    mom2_adjustment: bool = True
    mom2_ridge: float = 1e-4
    verify_write: bool = True       # the verdict is the edited model's (methods.verify), not the loop's
    update: UpdateConfig = field(default_factory=UpdateConfig)
    step_rows: int = 0              # > 0: each step scores its K deltas on the plain prompt and step_rows − 1
                                    # other rewrite rows drawn at random (forward.rows; the check reads every
                                    # row); 0: every row. Eager only (a bundle's edit program has static rows)
    stop_on: str = FZOO.success.stop_on  # recipes.STOP_ON: "written" — the loop stops only where the edited
                                    # model says the fact (methods.verify.written_judge as the driver's
                                    # confirm); "loop": the search's own rule (bench row fzoo-loop)
    reuse_checked: bool = True      # driver.search_value: a step's base row that the last check scored is
                                    # not run again (one evaluation a step fewer); false: the search before
    settle: Settle = field(default_factory=Settle)  # recipes.Settle: after the first success, shrink and
                                    # search again (rounds 0: off, the search stops at its first success)

    def __post_init__(self) -> None:
        if self.layer < 0:
            raise ConfigError(f"layer must be >= 0, got {self.layer}", where="mobiedit.layer",
                              fix="pick a layer index of the model")
        check_fraction(self.success_fraction, "mobiedit.success_fraction")
        check_nll(self.success_nll, "mobiedit.success_nll")
        check_mom2_ridge(self.mom2_ridge, "mobiedit.mom2_ridge")
        check_stop_on(self.stop_on, "mobiedit.stop_on")
        if self.stop_on == "written" and not self.verify_write:
            raise ConfigError("stop_on 'written' needs the write check", where="mobiedit.stop_on",
                              fix="set verify_write: true, or also set stop_on: loop")
        if isinstance(self.step_rows, bool) or not isinstance(self.step_rows, int) or self.step_rows < 0:
            raise ConfigError(f"step_rows must be an integer >= 0, got {self.step_rows!r}", where="mobiedit.step_rows",
                              fix="0 (every rewrite row a step) or the rows a step reads, e.g. 6")
        if self.step_rows and not self.prefix_reuse:
            raise ConfigError("step_rows needs the prefix-reusing graph", where="mobiedit.step_rows",
                              fix="set prefix_reuse: true, or step_rows: 0")
        if self.backend not in ("native", "python"):
            raise ConfigError(f"unknown backend {self.backend!r}", where="mobiedit.backend",
                              fix="use 'native' (C++ engine) or 'python' (reference)")

    @property
    def recipe(self) -> EditRecipe:
        """This config's search and success rule, as the driver takes them."""
        return EditRecipe(self.zo, SuccessCriterion(self.success_fraction, self.success_nll, self.stop_on), self.settle)


def build_graph(fwd_model, lm: LoadedModel, inputs: EditInputs, cfg: MobiEditConfig,
                row_gain: torch.Tensor | None = None):
    """The forward-only graph of one edit's ``inputs`` (prefix-reusing or full) on ``fwd_model``;
    ``row_gain`` [B]: the delta's gain per prompt row (:func:`~mobiedit.methods.rome.search_keys`)."""
    state = compute_prefix_state(fwd_model, lm.family, cfg.layer, inputs, row_gain)
    if cfg.prefix_reuse:
        return PrefixGraph(fwd_model, lm.family, state, cfg.objective), state, inputs
    return FullGraph(fwd_model, lm.family, cfg.layer, inputs, state, cfg.objective), state, inputs


def lower_layers_paged(model: torch.nn.Module, family, cfg):
    """:func:`~mobiedit.forward.stream.layers_paged_out` of ``model`` for a config that pages out the
    layers ≤ l (``page_out_lower`` with prefix reuse: a full-graph loop runs every layer each step,
    nothing to page out); a null context for any other config (ROME's has no ``page_out_lower``)."""
    if getattr(cfg, "page_out_lower", False) and cfg.prefix_reuse:
        return layers_paged_out(model, family, cfg.layer)
    return nullcontext()


def forward_model(lm: LoadedModel, cfg: MobiEditConfig) -> torch.nn.Module:
    """The model the loop's forwards run on: a pre-quantized checkpoint (``mobiedit quantize``)
    itself, else a quantized copy of ``lm.model`` per ``cfg.quant`` (``lm.model`` for ``none``).
    Build it once per model and pass it to every :func:`mobiedit_edit`: quantizing costs a copy."""
    if is_prequantized(lm.model):
        for layer in written_layers(cfg.layer, cfg.update):  # every matrix the edit writes
            check_prequantized(lm.model, lm.family, layer)
        return lm.model
    return quantized_copy(lm.model, lm.family, written_layers(cfg.layer, cfg.update), cfg.quant)


def mobiedit_edit(lm: LoadedModel, req: EditRequest, cfg: MobiEditConfig, ctx: ModelContext,
                  fwd_model: torch.nn.Module | None = None, on_step: StepFn | None = None,
                  start: torch.Tensor | None = None) -> EditOutcome:
    """One forward-only edit. ``fwd_model`` is the (quantized) model the loop's forwards run on
    (default: :func:`forward_model`, built for this edit, its time included in ``wall_time``); the
    factors are computed on ``lm.model``. ``start``: the value delta the search starts from (None:
    zero; a clamp ladder's earlier rung)."""
    t0 = time.perf_counter()
    if fwd_model is None:
        fwd_model = forward_model(lm, cfg)
    with lower_layers_paged(fwd_model, lm.family, cfg):
        return _search(lm, req, cfg, ctx, fwd_model, t0, on_step, start)


def _search(lm: LoadedModel, req: EditRequest, cfg: MobiEditConfig, ctx: ModelContext,
            fwd_model: torch.nn.Module, t0: float, on_step: StepFn | None = None,
            start: torch.Tensor | None = None) -> EditOutcome:
    """The prefix state, the driver's value search on its graph, and the factors of the found delta
    (keys measured on the float model ``lm``, or per ``cfg.update.key_source`` on ``fwd_model``)."""
    inputs = build_edit_inputs(lm.tokenizer, req, ctx.templates, cfg.objective)
    klm = key_model(lm, fwd_model, cfg.update)
    keys, gains = search_keys(klm, ctx, req, cfg.layer, cfg.mom2_ridge, cfg.update, inputs)
    graph, state, _ = build_graph(fwd_model, lm, inputs, cfg, gains)

    confirm = _WrittenStop(lm, req, cfg, ctx, klm, keys, inputs) if cfg.stop_on == "written" else None
    stepper = RowSampledGraph(graph, cfg.step_rows, torch.Generator().manual_seed(cfg.zo.seed)) \
        if cfg.step_rows else None
    found = search_value(graph, state.v_init, cfg.objective, cfg.recipe, cfg.backend, cfg.early_stop, on_step, start,
                         confirm, stepper, cfg.reuse_checked)
    keys = confirm.keys if confirm is not None else keys
    u, w, key = factors_from_delta(klm, ctx, req, cfg.layer, found.delta, cfg.mom2_ridge, cfg.update, keys)
    checked = confirm.verdict_of(found.delta) if confirm is not None else None
    extra = confirm.forwards if confirm is not None else 0
    return EditOutcome(method="mobiedit", layer=cfg.layer, module=module_name(lm.family, cfg.layer), u=u, w=w,
                       succeeded=found.succeeded, status=found.status, loss_evals=found.evals,
                       sequences=found.sequences, forward_calls=found.calls + 2 + extra,
                       backward_calls=0, wall_time=time.perf_counter() - t0, losses=found.losses, seed=cfg.zo.seed,
                       key=key, distinct_evals=found.distinct_evals, loop_holds=found.holds, delta=found.delta,
                       config={**search_provenance(cfg),
                               **({"stop_on": found.stop_on, "written_checks": found.confirms,
                                   "written_refused": found.refused} if confirm is not None else {}),
                               **({"found_norm": found.found_norm, "settled": found.settled}
                                  if cfg.settle.rounds else {})},
                       write=checked.as_dict() if checked is not None else {})


def search_provenance(cfg: MobiEditConfig) -> dict:
    """What a journal entry records of the search that made it, as a bundle edit's entry does
    (``export.ops``): the ZO settings, the success rule and the forward the search ran on."""
    head = {"head_matmul": cfg.quant.head_matmul} if cfg.quant.head_matmul != "float32" else {}
    return search_record(cfg.zo, cfg.success_fraction, cfg.success_nll, cfg.settle) | {"quant": cfg.quant.scheme} | head


class _WrittenStop:
    """The driver's ``confirm`` for ``stop_on`` "written": whether the rank-one write of a delta
    makes the float model say the fact (:class:`~mobiedit.methods.verify.WrittenJudge`, the rule
    of :func:`~mobiedit.session.run_once`'s verify). What does not depend on the delta — the
    request's keys and solve direction, the unedited prefix state — is measured on the first call
    only; each delta's verdict is kept, so the verify of the found delta is not run twice."""

    def __init__(self, lm: LoadedModel, req: EditRequest, cfg: MobiEditConfig, ctx: ModelContext, klm: LoadedModel,
                 keys, inputs: EditInputs):
        self.lm, self.req, self.cfg, self.ctx, self.klm, self.keys = lm, req, cfg, ctx, klm, keys
        self.inputs = inputs  # the search's rows: the judge reads the same ones
        self.judge: WrittenJudge | None = None
        self.judged = 0
        self._verdicts: dict[bytes, WriteCheck] = {}

    @property
    def forwards(self) -> int:
        """Forwards of the float model the checks ran: two to build the judge, two per verdict."""
        return 2 * self.judged + (2 if self.judge is not None else 0)

    def verdict_of(self, delta: torch.Tensor) -> WriteCheck | None:
        """The kept verdict of ``delta`` (None: never judged)."""
        return self._verdicts.get(_delta_key(delta))

    def __call__(self, delta: torch.Tensor) -> bool:
        k = _delta_key(delta)
        if k not in self._verdicts:
            cfg = self.cfg
            if self.judge is None:
                self.keys = self.keys or edit_keys(self.klm, self.ctx, self.req, cfg.layer, cfg.mom2_ridge, cfg.update)
                self.judge = written_judge(self.lm, self.req, cfg.layer, self.ctx, cfg.objective, self.inputs)
            u, w, _ = factors_from_delta(self.klm, self.ctx, self.req, cfg.layer, delta, cfg.mom2_ridge, cfg.update,
                                         self.keys)
            self._verdicts[k] = self.judge(u, w, cfg.success_fraction, None)
            self.judged += 1
        return self._verdicts[k].holds


def _delta_key(delta: torch.Tensor) -> bytes:
    return delta.detach().reshape(-1).to("cpu", torch.float32).numpy().tobytes()
