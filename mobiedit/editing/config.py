"""ROME's hyper-parameters (defaults as in ROME's GPT-2 XL / EasyEdit Llama settings)."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

from ..errors import ConfigError
from ..forward.quant import QuantConfig
from ..recipes import SuccessCriterion, check_fraction


@dataclass(frozen=True)
class ContextConfig:
    """Context templates: ``count`` generated prefixes of ``length`` tokens each, plus ``"{}"``."""

    lengths: tuple[tuple[int, int], ...] = ((5, 10), (10, 10))  # (tokens, count)
    seeds: tuple[str, ...] = ("The", "Therefore", "Because", "I", "You")

    def __post_init__(self) -> None:
        for i, pair in enumerate(self.lengths):
            if len(pair) != 2 or min(pair) < 0:
                raise ConfigError(f"entry {i} must be (tokens>=0, count>=0), got {pair!r}",
                                  where="context.lengths", fix="e.g. [[5, 10], [10, 10]]")


@dataclass(frozen=True)
class ObjectiveConfig:
    """The value-search objective shared by backprop and forward-only search.

    loss = NLL(target | context-templated prompts) + kl_factor * KL(orig || new on "{} is a")
           + weight_decay * ||delta|| / ||v_init||^2 ; delta clamped to clamp_norm_factor * ||v_init||.
    """

    kl_factor: float = 0.0625
    kl_prompt: str = "{} is a"
    weight_decay: float = 0.5
    clamp_norm_factor: float = 4.0

    def __post_init__(self) -> None:
        if self.kl_factor < 0 or self.weight_decay < 0 or self.clamp_norm_factor <= 0:
            raise ConfigError("kl_factor, weight_decay must be >= 0 and clamp_norm_factor > 0",
                              where="objective", fix="use ROME's defaults 0.0625, 0.5, 4.0")
        if self.kl_prompt.count("{}") != 1:
            raise ConfigError("must contain exactly one '{}' subject slot", where="objective.kl_prompt",
                              fix="e.g. '{} is a'")


UPDATE_RULES = ("rome", "nullspace", "protect", "rows", "rows-protect")
KEY_SOURCES = ("served", "search")


def check_ladder(values, where: str, fix: str) -> None:
    """The rule of every clamp ladder (``update.clamp_ladder``, a bundle recipe's ``ladder``):
    finite positive numbers, strictly increasing (the smallest value change first)."""
    ok = all(isinstance(c, (int, float)) and not isinstance(c, bool) and math.isfinite(c) and c > 0 for c in values)
    if not ok or list(values) != sorted(set(values)):
        raise ConfigError(f"{where}={list(values)[:8]} must be increasing positive factors", where=where, fix=fix)


def _finite_number(value, zero_ok: bool) -> bool:
    """A finite int or float (not a bool) that is > 0, or >= 0 when ``zero_ok``."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    return value >= 0 if zero_ok else value > 0


def check_rows_ridge(value, where: str) -> None:
    """The ``rows`` rule's ridge (``update.rows_ridge``, a bundle's ``edit.rows_ridge``): a finite
    number > 0; a ConfigError naming ``where`` otherwise."""
    if not _finite_number(value, zero_ok=False):
        raise ConfigError(f"rows_ridge={value!r} must be a finite number > 0", where=where,
                          fix="e.g. 1e-2 (relative to the mean diagonal of KᵀC⁻¹K)")


def check_mom2_ridge(value, where: str) -> None:
    """The relative ridge added to the key statistics ``C`` before a solve (``rome.mom2_ridge``,
    ``mobiedit.mom2_ridge``; ``λ = mom2_ridge · mean(diag C)``): a finite number >= 0; a ConfigError
    naming ``where`` otherwise."""
    if not _finite_number(value, zero_ok=True):
        raise ConfigError(f"mom2_ridge={value!r} must be a finite number >= 0", where=where,
                          fix="e.g. 1e-4 (numerical safety, the default) or 1 (a norm constraint on the update)")


def check_edited_weight(value, where: str) -> None:
    """The protecting rules' weight of the applied edits' keys (``update.edited_weight``, a bundle's
    ``edit.update.edited_weight``): a finite number > 0; a ConfigError naming ``where`` otherwise."""
    if not _finite_number(value, zero_ok=False):
        raise ConfigError(f"edited_weight={value!r} must be a finite number > 0", where=where,
                          fix="e.g. 1 (each applied edit's key counts as one average token of the key statistics C)")


@dataclass(frozen=True)
class UpdateConfig:
    """How a found value becomes the rank-one weight change ``u wᵀ`` (both methods; the journal
    stores the factors either way, so undo stays exact).

    * ``rome`` — ``w ∝ C⁻¹k̄`` (ROME): the least change to the keys of natural text, on average.
    * ``nullspace`` — AlphaEdit's direction: ``w ∝ (P (k̄k̄ᵀ + K_p K_pᵀ) + α I)⁻¹ P k̄``, where ``P``
      projects onto the span of the eigenvectors of ``C`` whose eigenvalues are below
      ``nullspace_threshold`` × the largest (directions natural text barely uses) and ``K_p`` are
      the keys of the edits already applied in this session (a later edit avoids moving them);
      ``α = alpha · ‖P k̄‖²`` (scale-free).
    * ``protect`` — ROME's direction with the applied edits' keys in the normal matrix:
      ``w ∝ (C + edited_weight · K_p K_pᵀ)⁻¹ k̄`` (AlphaEdit's key cache without its projection;
      MEMIT's normal equation with earlier edits as preserved keys). ``C`` is the mean second
      moment of natural text's keys, so ``edited_weight`` 1 counts each earlier edit's key as much
      as one average token of it — with ``C``'s small eigenvalues, enough to hold that key still.
    * ``rows`` — the write at the keys that were searched (issue 18, item 2): ``w`` with
      ``wᵀk_i = 1`` at every context template's key ``k_i`` (the plain prompt's among them) and
      the least ``wᵀCw`` among those — ``C⁻¹K (KᵀC⁻¹K + ρ I)⁻¹ 1`` with ``ρ = rows_ridge ·
      mean(diag KᵀC⁻¹K)``. The written update then adds the searched ``δ`` at each template row's
      key, not ``δ·(wᵀk_i)``; a large ``rows_ridge`` gives back ROME's ``C⁻¹k̄``. A bundle carries
      it too (manifest ``edit.update``, ``mobiedit export --update-rule rows``).
    * ``rows-protect`` — ``rows`` with ``protect``'s normal matrix ``C + edited_weight · K_p K_pᵀ``:
      exact at every template key of this edit, the least change to natural text's keys and to
      the applied edits' keys (sequential editing, issue 16). A bundle carries ``protect`` and
      ``rows-protect`` too (manifest ``edit.update``, each edit's key journaled; the keys enter C
      after its ridge there, :func:`mobiedit.editing.update.bundle_direction`).
    Either way ``w`` is normalised so that the plain prompt's key gets exactly ``v*`` (ROME's
    normalisation; AlphaEdit's own solve leaves the target short by ``α``). At another row's key
    ``k_i`` the written update adds ``δ·(wᵀk_i)``, not ``δ``: ``written_gain`` makes the value
    search see exactly that (:func:`mobiedit.methods.rome.search_keys`).

    ``key_source`` — where the keys ``k̄``, ``k`` and the current output ``W k`` are read (issue 18):
    ``served`` (default), from the model that serves the edit — the float weights on the eager
    path, as the bundle path reads them from its own (quantized) prefix program; ``search``, from
    the forward model the value search ran on (the quantized copy), the alternative measured in
    docs/results.md.

    ``key_refresh`` — how the applied edits' keys ``K_p`` that ``protect``, ``rows-protect`` and
    ``nullspace`` hold still are kept: 0 (default), each edit's key as it was solved; n > 0, every n
    applied edits each one is re-read from the model as it stands (:meth:`EditSession.apply`). They
    agree for one layer (no edit of a matrix changes its own input); with ``spread`` > 1 each lower
    part moves the keys of the layers above it, and a solve against the solved keys holds still keys
    the model no longer produces (docs/reliability.md, "Stale keys").
    """

    rule: str = "rome"
    nullspace_threshold: float = 1e-2
    alpha: float = 1.0
    edited_weight: float = 1.0
    rows_ridge: float = 1e-2  # rule "rows": the Gram matrix's relative ridge (→ ∞: ROME's direction)
    written_gain: bool = False  # the search adds δ·(wᵀk_i) at row i — what the written update will
                                # deliver at that row's key — instead of δ at every row (issue 18:
                                # search at the keys that are written; w does not depend on δ)
    key_source: str = "served"
    key_refresh: int = 0
    clamp_ladder: tuple[float, ...] = ()  # sequential safety (issue 16): try the edit with the value
                                # change clamped to each factor in turn (objective.clamp_norm_factor),
                                # keep the first the edited model says; () = the objective's clamp only
    spread: int = 1  # MEMIT's spreading (issue 16): the searched value change is written over this
                     # many consecutive layers ending at the edit layer (mobiedit.spread), each
                     # layer's rank-one update taking its share of what is left; 1 = one layer (ROME)
    ladder_warm_start: bool = False  # a rung after the first starts its search from the previous
                                # rung's delta (inside the smaller clamp, so inside this one) instead
                                # of δ = 0; cold when the previous rung's search passed but its
                                # write did not. Off: measured no cheaper and a little worse over 50
                                # sequential edits (docs/reliability.md, "Warm rungs")

    def __post_init__(self) -> None:
        if isinstance(self.clamp_ladder, list):
            object.__setattr__(self, "clamp_ladder", tuple(self.clamp_ladder))
        check_ladder(self.clamp_ladder, "update.clamp_ladder", "e.g. [2, 3, 4] (smallest value change first), or []")
        if self.rule not in UPDATE_RULES:
            raise ConfigError(f"unknown update rule {self.rule!r}", where="update.rule", fix=f"use one of {UPDATE_RULES}")
        if not 0.0 < self.nullspace_threshold < 1.0:
            raise ConfigError(f"nullspace_threshold={self.nullspace_threshold} out of (0, 1)",
                              where="update.nullspace_threshold", fix="e.g. 1e-2 (relative to C's largest eigenvalue)")
        check_edited_weight(self.edited_weight, "update.edited_weight")
        check_rows_ridge(self.rows_ridge, "update.rows_ridge")
        if not self.alpha > 0:
            raise ConfigError(f"alpha={self.alpha} must be > 0", where="update.alpha", fix="e.g. 1.0")
        if isinstance(self.spread, bool) or not isinstance(self.spread, int) or self.spread < 1:
            raise ConfigError(f"spread={self.spread!r} must be an integer >= 1", where="update.spread",
                              fix="e.g. 2 (the edit layer and the one below it), or 1 (one layer)")
        if self.key_source not in KEY_SOURCES:
            raise ConfigError(f"unknown key source {self.key_source!r}", where="update.key_source",
                              fix=f"use one of {KEY_SOURCES}")
        if isinstance(self.key_refresh, bool) or not isinstance(self.key_refresh, int) or self.key_refresh < 0:
            raise ConfigError(f"key_refresh={self.key_refresh!r} must be an integer >= 0", where="update.key_refresh",
                              fix="0 (keys as solved), or e.g. 10 (re-read the protected keys every 10 edits)")


def written_layers(layer: int, update: UpdateConfig) -> tuple[int, ...]:
    """The layers an edit at ``layer`` writes: ``layer`` alone, or with ``update.spread`` = n the n
    consecutive layers ending at it (lowest first). ConfigError when they would start below layer 0."""
    first = layer - update.spread + 1
    if first < 0:
        raise ConfigError(f"update.spread={update.spread} reaches below layer 0 from edit layer {layer}",
                          where="update.spread", fix=f"use at most {layer + 1}, or a higher edit layer")
    return tuple(range(first, layer + 1))


@dataclass(frozen=True)
class ROMEConfig:
    """Backprop ROME: Adam on the value delta, then the rank-one update."""

    layer: int = 1
    steps: int = 50  # ROME: 20-25 plus a loss<5e-2 stop; on the fact LM the decay term keeps the
                     # loss above it, and 25 steps left 5.5 % of 200 edits short (docs/results.md)
    lr: float = 0.5
    early_loss: float = 5e-2
    success_fraction: float = SuccessCriterion.fraction  # see objective.edit_holds; below it the edit
                                    # is reported failed (the default of mobiedit.recipes.SuccessCriterion)
    mom2_adjustment: bool = True
    mom2_ridge: float = 1e-4  # relative ridge added to C before solving (numerical safety)
    prefix_reuse: bool = False  # True: backprop through the forward-only method's prefix graph
                                # (layers > l from the subject on, no weight gradients): rome-lean
    verify_write: bool = True  # the verdict is the edited model's (methods.verify), not the search's
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)
    context: ContextConfig = field(default_factory=ContextConfig)
    update: UpdateConfig = field(default_factory=lambda: UpdateConfig())
    quant: QuantConfig = field(default_factory=lambda: QuantConfig("none"))  # the weights the search's
                                # forwards and backwards run on (forward.quant; e.g. bf16 as MobiEdit's
                                # bf16 row); the key and the update always come from the float model

    def __post_init__(self) -> None:
        if self.layer < 0:
            raise ConfigError(f"layer must be >= 0, got {self.layer}", where="rome.layer",
                              fix="pick a layer index of the model")
        check_fraction(self.success_fraction, "rome.success_fraction")
        check_mom2_ridge(self.mom2_ridge, "rome.mom2_ridge")
        if self.steps < 1 or not (0 < self.lr < 100):
            raise ConfigError("steps must be >= 1 and lr in (0, 100)", where="rome.steps/lr",
                              fix="ROME's defaults: steps 20-25, lr 0.5")
