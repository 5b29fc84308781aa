"""Named edit recipes: how a value search runs (``zo``) and when an edit counts as done (``success``).

The only place the searches' defaults are written. :data:`FZOO` is the shipped recipe (the
default of :class:`~mobiedit.methods.mobiedit.MobiEditConfig`, and the one a bundle's manifest
carries, :mod:`mobiedit.export.recipe`); :data:`PAPER` is the MobiEdit paper's estimator (the
``paper*`` rows of :mod:`mobiedit.bench`); :data:`ANTITHETIC` is FZOO's budget with antithetic
pairs. The driver (:func:`mobiedit.driver.search_value`) takes an :class:`EditRecipe`.

Contract: both dataclasses are frozen and validate themselves on construction, raising
:class:`~mobiedit.errors.ConfigError` naming the field and the fix; :func:`check_fraction` and
:func:`check_nll` are that validation for configs that carry the thresholds as their own fields.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from mobiedit.config_io import check_fraction, check_nll
from mobiedit.errors import ConfigError
from mobiedit.settle import Settle
from mobiedit.zo.config import ZOConfig

__all__ = ["SuccessCriterion", "Settle", "EditRecipe", "FZOO", "FZOO_LR2", "FZOO_GRADIENT", "PAPER", "ANTITHETIC", "BUNDLE_RECIPES",
           "bundle_recipe", "STOP_ON", "check_fraction", "check_nll",
           "check_stop_on"]

#: what stops a value search: ``"loop"`` — the success rule on the search's own graph at the
#: searched delta; ``"written"`` — where that rule passes, the host's verify after write too (the
#: driver's ``confirm``: the delta's rank-one write must say the fact, else the search goes on)
STOP_ON = ("loop", "written")


def check_stop_on(value, where: str) -> None:
    """Refuse a ``stop_on`` that is not one of :data:`STOP_ON` (``where``: the field's dotted name)."""
    if value not in STOP_ON:
        raise ConfigError(f"stop_on {str(value)[:40]!r} is not one of {', '.join(STOP_ON)}", where=where,
                          fix="use 'written' (stop where the written edit holds) or 'loop' (the search's own rule)")


@dataclass(frozen=True)
class SuccessCriterion:
    """When a searched delta counts as an edit (the early stop and the loop's verdict).

    ``fraction``: :func:`mobiedit.editing.objective.edit_holds` — the plain rewrite prompt and at
    least this share of all rewrite rows show the whole target as the argmax; ``nll``:
    :func:`mobiedit.editing.objective.within_margin` — the objective minus its decay term (mean
    target NLL per token + KL) is at most this, a margin like ROME's loss-based stop; ``stop_on``
    (:data:`STOP_ON`): where the rule passes, whether the search stops (``"loop"``) or stops only
    if the host's written edit also holds (``"written"``, the shipped rule since session 17: the
    driver's ``confirm``; a host that cannot check the write passes none and gets ``"loop"``).
    """

    fraction: float = 0.75
    nll: float = 0.5
    stop_on: str = "written"

    def __post_init__(self) -> None:
        check_fraction(self.fraction, "SuccessCriterion.fraction")
        check_nll(self.nll, "SuccessCriterion.nll")
        check_stop_on(self.stop_on, "SuccessCriterion.stop_on")


@dataclass(frozen=True)
class EditRecipe:
    """A value search (``zo``; its ``max_norm`` is set by the driver from the objective's clamp),
    its success rule and what it does after the first success (``settle``, off by default)."""

    zo: ZOConfig
    success: SuccessCriterion = field(default_factory=SuccessCriterion)
    settle: Settle = field(default_factory=Settle)

    def __post_init__(self) -> None:
        if not isinstance(self.zo, ZOConfig):
            raise ConfigError(f"zo is a {type(self.zo).__name__}, expected ZOConfig", where="EditRecipe.zo",
                              fix="build it with mobiedit.zo.ZOConfig(...) or take a named recipe's (recipes.FZOO.zo)")
        if not isinstance(self.success, SuccessCriterion):
            raise ConfigError(f"success is a {type(self.success).__name__}, expected SuccessCriterion",
                              where="EditRecipe.success", fix="build it with mobiedit.recipes.SuccessCriterion(...)")
        if not isinstance(self.settle, Settle):
            raise ConfigError(f"settle is a {type(self.settle).__name__}, expected Settle",
                              where="EditRecipe.settle", fix="build it with mobiedit.recipes.Settle(...)")


#: the shipped forward-only recipe: FZOO (one-sided, sigma-normalised, 16 Rademacher directions,
#: K = 17 per step), Adam, 150 steps / 3000 evaluations, checked every step
FZOO = EditRecipe(ZOConfig(estimator="fzoo", n_dirs=16, h=0.05, optimizer="adam", lr=0.5, max_steps=150,
                           max_evals=3000, check_every=1, loss_tol=0.0, patience=0, seed=0))

#: the MobiEdit paper's estimator: 5 Gaussian directions as (x + hu, x − hu, x) triples, SGD with a
#: cosine schedule, its own stop at loss < 1e-5, 1200 steps / 18000 evaluations
PAPER = EditRecipe(ZOConfig(estimator="paper", n_dirs=5, h=1e-3, optimizer="sgd", lr=5e-2, lr_schedule="cosine",
                            max_steps=1200, max_evals=18000, check_every=1, loss_tol=1e-5))

#: FZOO's rows on coordinate directions, each step sized by the whole gradient (ZOConfig.normalise
#: "gradient", issue 18), plain SGD at lr 4 (a cycle of 576 / 16 steps moves about lr·√d along the
#: normalised gradient), stopped at ROME's margin (objective within 0.1 of its floor); the lr and the
#: margin are the probe's first guesses (docs/results.md), not tuned
FZOO_GRADIENT = EditRecipe(dataclasses.replace(FZOO.zo, directions="coordinates", normalise="gradient",
                                               optimizer="sgd", momentum=0.0, lr=4.0),
                           SuccessCriterion(nll=0.1))

#: FZOO at Adam lr 2 (session 12's held-out choice): about half the shipped recipe's evaluations per
#: success at ROME's success rate on the fact LM and SmolLM2, generalization within 3 points of ROME on
#: the fact LM but 3 below the shipped lr 0.5 there (docs/results.md, "Each point scored once, and the
#: lr that reaches 450") — a recipe a user picks for speed, not the default
FZOO_LR2 = EditRecipe(dataclasses.replace(FZOO.zo, lr=2.0))

#: FZOO's search with antithetic pairs (8 directions, K = 16)
ANTITHETIC = EditRecipe(dataclasses.replace(FZOO.zo, estimator="antithetic", n_dirs=8))

#: the recipes a bundle can ship (``mobiedit export --recipe NAME``; the app runs FZOO's rows only:
#: one edit-program call of K = n_dirs + 1 rows per step)
BUNDLE_RECIPES: dict[str, EditRecipe] = {"fzoo": FZOO, "fzoo-lr2": FZOO_LR2, "fzoo-grad": FZOO_GRADIENT}


def bundle_recipe(name: str, where: str) -> EditRecipe:
    """The recipe :data:`BUNDLE_RECIPES` calls ``name``; a :class:`ConfigError` naming ``where``
    for any other name."""
    if name not in BUNDLE_RECIPES:
        raise ConfigError(f"unknown recipe {str(name)[:40]!r}", where=where, fix=f"use one of {', '.join(BUNDLE_RECIPES)}")
    return BUNDLE_RECIPES[name]


def search_record(zo: ZOConfig, success_fraction: float, success_nll: float, settle: Settle | None = None) -> dict:
    """What a journal entry records of the forward-only search that made it — the eager path's
    (:mod:`mobiedit.methods.mobiedit`) and the bundle's (``export.ops``) alike: the ZO settings, the
    success rule and, when it ran, the settle phase."""
    out = {"zo": zo.as_dict(), "success_fraction": success_fraction, "success_nll": success_nll}
    return out | ({"settle": dataclasses.asdict(settle)} if settle is not None and settle.rounds else {})
