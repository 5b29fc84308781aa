"""One search driver (issue 15): mobiedit.driver.search_value over any EditGraph, the named recipes
(mobiedit.recipes) as the only defaults, one KV shim, one KL expression."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from mobiedit.driver import search_value, success_holds
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.objective import full_rows, kl_rows
from mobiedit.errors import ConfigError, NumericalError
from mobiedit.recipes import ANTITHETIC, FZOO, PAPER, EditRecipe, SuccessCriterion
from mobiedit.zo import ZOConfig
from mobiedit.zo.estimators import distinct_rows_per_step, make_estimator


class Quadratic:
    """A toy EditGraph: loss ‖δ − t‖², row b holds (count = target_len) iff δ is within r_b of t."""

    n_rows, n_rewrite, target_len = 5, 4, 3

    def __init__(self, target: torch.Tensor) -> None:
        self.t = target
        self.radii = torch.tensor([2.0, 2.0, 0.5, 1e-9])
        self.calls: list[int] = []

    def __call__(self, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        self.calls.append(deltas.shape[0])
        dist = (deltas - self.t).norm(dim=-1, keepdim=True)
        correct = (dist <= self.radii).float() * self.target_len
        return (deltas - self.t).pow(2).sum(-1), correct


@pytest.mark.parametrize("name", ["paper", "fzoo", "antithetic"])
def test_distinct_rows_per_step_is_what_the_estimator_proposes(name):
    est = make_estimator(name, 6, 0.05, 3, 32)
    x = np.random.default_rng(0).standard_normal(32).astype(np.float32)
    for step in range(3):
        D = est.propose(x, step)
        assert len(np.unique(D, axis=0)) == distinct_rows_per_step(name, 6) <= D.shape[0]


@pytest.mark.parametrize("backend", ["python", "native"])
@pytest.mark.parametrize("early_stop", [True, False])
def test_search_value_counts_and_units(backend, early_stop):
    d = 8
    v_init = torch.full((d,), 2.0)
    target = torch.linspace(-1, 1, d) * 0.5
    graph = Quadratic(target)
    zo = dataclasses.replace(FZOO.zo, n_dirs=4, max_steps=40, max_evals=10_000, lr=0.05)
    obj = ObjectiveConfig()
    steps: list[tuple[int, float]] = []
    found = search_value(graph, v_init, obj, EditRecipe(zo, SuccessCriterion(0.5, 10.0)), backend, early_stop,
                         on_step=lambda c, loss: steps.append((c, loss)))
    scale = float(v_init.norm()) / math.sqrt(d)
    assert found.scale == scale and found.zo.max_norm == obj.clamp_norm_factor * math.sqrt(d)
    assert found.delta.dtype == torch.float32 and found.delta.shape == (d,)
    K = zo.K
    forwards = [c for c in graph.calls if c == K]
    assert found.evals == sum(graph.calls) and found.calls == len(graph.calls)
    assert found.distinct_evals == len(forwards) * distinct_rows_per_step("fzoo", 4) + (len(graph.calls) - len(forwards))
    assert found.sequences == found.evals * graph.n_rows
    assert len(found.losses) == len(forwards) == len(steps)
    assert [c for c, _ in steps] == [i + 1 for i, c in enumerate(graph.calls) if c == K]
    if early_stop:
        assert found.status == "SUCCESS_CHECK" and found.succeeded and found.holds
    else:
        assert found.status == "MAX_STEPS" and graph.calls[-1] == 1  # the final delta checked once


@pytest.mark.parametrize("backend", ["python", "native"])
def test_search_value_starts_where_it_is_told(backend):
    """``start`` (model units) is the loop's first point: at the target the first check passes; far
    outside the clamp it is pulled onto the ball's surface."""
    d = 8
    v_init = torch.full((d,), 2.0)
    target = torch.linspace(-1, 1, d) * 2.5  # ‖t‖ > 2: δ = 0 is outside every row's radius
    zo = dataclasses.replace(FZOO.zo, n_dirs=4, max_steps=200, max_evals=10_000, lr=0.05, check_every=1)
    recipe = EditRecipe(zo, SuccessCriterion(0.5, 10.0))
    cold = search_value(Quadratic(target), v_init, ObjectiveConfig(), recipe, backend)
    warm = search_value(Quadratic(target), v_init, ObjectiveConfig(), recipe, backend, start=target)
    assert warm.succeeded and cold.succeeded and warm.evals < cold.evals
    assert (warm.delta - target).norm() < (cold.delta - target).norm() + 1e-6
    from mobiedit.driver import start_point

    x = start_point(torch.full((d,), 100.0), 0.5, 3.0, d)
    assert x.dtype == np.float32 and abs(float(np.linalg.norm(x)) - 3.0) < 1e-5
    assert not start_point(None, 0.5, 3.0, d).any()
    assert np.allclose(start_point(target, 0.5, 100.0, d), target.numpy() / 0.5)  # inside: unchanged


@pytest.mark.parametrize("backend", ["python", "native"])
def test_confirm_is_asked_only_where_the_rule_passes_and_refusals_keep_searching(backend):
    """``confirm`` (the written verdict as the stop, recipe ``success.stop_on: written``): asked
    only at deltas the loop's rule passed, a refusal does not stop the loop, and the search stops
    at the first delta confirm accepts — closer to the target than where the rule alone stopped."""
    d = 8
    v_init = torch.full((d,), 2.0)
    target = torch.linspace(-1, 1, d) * 0.5
    zo = dataclasses.replace(FZOO.zo, n_dirs=4, max_steps=400, max_evals=100_000, lr=0.05)
    recipe = EditRecipe(zo, SuccessCriterion(0.5, 10.0))
    plain = search_value(Quadratic(target), v_init, ObjectiveConfig(), recipe, backend)
    stop_at = float((plain.delta - target).norm())
    asked: list[float] = []

    def written(delta: torch.Tensor) -> bool:  # a stricter verdict: within half the plain stop's distance
        dist = float((delta - target).norm())
        asked.append(dist)
        assert dist <= 2.0 + 1e-6  # only where the rule (two rows of radius 2 of four) passed
        return dist <= 0.5 * stop_at

    found = search_value(Quadratic(target), v_init, ObjectiveConfig(), recipe, backend, confirm=written)
    assert plain.succeeded and plain.confirms == 0 and plain.refused == 0
    assert plain.stop_on == "loop" and found.stop_on == "written"  # the stop run, not the recipe's wish
    assert found.succeeded and found.status == "SUCCESS_CHECK"
    assert found.confirms == len(asked) >= 2 and found.refused == found.confirms - 1
    assert float((found.delta - target).norm()) <= 0.5 * stop_at < stop_at
    assert found.evals > plain.evals
    never = search_value(Quadratic(target), v_init, ObjectiveConfig(),
                         EditRecipe(dataclasses.replace(zo, max_steps=30), SuccessCriterion(0.5, 10.0)), backend,
                         confirm=lambda delta: False)
    assert not never.succeeded and never.status == "MAX_STEPS" and never.refused == never.confirms > 0


@pytest.mark.parametrize("backend", ["python", "native"])
def test_holds_is_the_row_rule_without_the_margin(backend):
    """``holds`` (the verdict comparable with the edited model's) is edit_holds at the found delta;
    ``succeeded`` adds the NLL margin. A margin no loss can meet: the search fails, the rows hold."""
    d = 8
    target = torch.linspace(-1, 1, d) * 0.5
    zo = dataclasses.replace(FZOO.zo, n_dirs=4, max_steps=40, max_evals=10_000, lr=0.05)
    obj = dataclasses.replace(ObjectiveConfig(), weight_decay=0.0)

    class Offset(Quadratic):  # the loss never falls below 5: over any margin < 5
        def __call__(self, deltas):
            losses, correct = super().__call__(deltas)
            return losses + 5.0, correct

    found = search_value(Offset(target), torch.full((d,), 2.0), obj, EditRecipe(zo, SuccessCriterion(0.5, 1.0)), backend)
    assert not found.succeeded and found.holds and found.status == "MAX_STEPS"
    far = search_value(Offset(target + 100.0), torch.full((d,), 2.0), obj,
                       EditRecipe(dataclasses.replace(zo, max_steps=2), SuccessCriterion(0.5, 1.0)), backend)
    assert not far.succeeded and not far.holds


def test_search_value_raises_on_nonfinite_losses():
    class Nan(Quadratic):
        def __call__(self, deltas):
            losses, correct = super().__call__(deltas)
            return torch.full_like(losses, float("nan")), correct

    with pytest.raises(NumericalError):
        search_value(Nan(torch.zeros(4)), torch.ones(4), ObjectiveConfig(), FZOO, "python")


def test_success_rule_counts_full_rows_and_the_margin():
    obj = ObjectiveConfig()
    c = torch.tensor([3.0, 3.0, 2.0, 3.0])
    assert full_rows(c, 3).tolist() == [True, True, False, True]
    rule = SuccessCriterion(0.75, 0.5)
    assert success_holds(0.4, c, 3, 0.0, 1.0, obj, rule)
    assert not success_holds(0.6, c, 3, 0.0, 1.0, obj, rule)                      # over the margin
    assert not success_holds(0.4, c, 3, 0.0, 1.0, obj, SuccessCriterion(1.0, 0.5))  # 3 of 4 rows
    assert not success_holds(0.4, torch.tensor([2.0, 3, 3, 3]), 3, 0.0, 1.0, obj, rule)  # plain prompt


def test_recipes_validate_and_are_the_only_defaults():
    from mobiedit.bench import row_config
    from mobiedit.editing.config import ROMEConfig
    from mobiedit.methods.mobiedit import MobiEditConfig

    for bad, field in (({"fraction": 1.5}, "fraction"), ({"fraction": -0.1}, "fraction"), ({"nll": 0.0}, "nll"),
                       ({"nll": "0.5"}, "nll")):
        with pytest.raises(ConfigError, match=f"SuccessCriterion.{field}") as e:
            SuccessCriterion(**bad)
        assert e.value.fix
    with pytest.raises(ConfigError, match="EditRecipe.zo"):
        EditRecipe({"estimator": "fzoo"})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="EditRecipe.success"):
        EditRecipe(FZOO.zo, 0.75)  # type: ignore[arg-type]
    cfg = MobiEditConfig()
    assert cfg.zo == FZOO.zo and cfg.recipe == FZOO
    assert ROMEConfig().success_fraction == FZOO.success.fraction
    assert row_config("fzoo", 1, 0).zo == FZOO.zo
    assert row_config("paper", 1, 0).zo == PAPER.zo
    assert row_config("antithetic", 1, 0).zo == ANTITHETIC.zo
    assert row_config("paper-check", 1, 0).zo == dataclasses.replace(PAPER.zo, loss_tol=0.0)
    assert PAPER.zo == ZOConfig(estimator="paper", n_dirs=5, h=1e-3, optimizer="sgd", lr=5e-2,
                                lr_schedule="cosine", max_steps=1200, max_evals=18000, loss_tol=1e-5)


def test_one_kv_shim_and_one_kl_expression():
    from mobiedit.export.adapters import RecordingKV as FromAdapters
    from mobiedit.forward.kv import RecordingKV

    assert FromAdapters is RecordingKV
    pk, pv, k, v = (torch.randn(2, 1, n, 4) for n in (3, 3, 2, 2))
    for record in (True, False):
        cache = RecordingKV({5: (pk, pv)}, record=record)
        ok, ov = cache.update(k, v, 5)
        assert torch.equal(ok, torch.cat([pk, k], 2)) and torch.equal(ov, torch.cat([pv, v], 2))
        assert cache.update(k, v, 6) == (k, v)  # no past: the new keys alone
        assert (set(cache.new) == {5, 6}) is record
    ref = torch.log_softmax(torch.randn(2, 7), -1)
    new = torch.log_softmax(torch.randn(3, 2, 7), -1)
    assert torch.equal(kl_rows(ref, new), (ref.exp() * (ref - new)).sum(-1))
    assert torch.allclose(kl_rows(ref, ref.expand(3, 2, 7)), torch.zeros(3, 2), atol=1e-6)


@pytest.mark.parametrize("backend", ["python", "native"])
def test_a_checked_point_is_not_evaluated_again_as_the_next_base_row(backend):
    """``reuse_checked``: FZOO's row 0 is the delta the last check scored, so it takes the check's loss —
    the same search (the toy's loss is row-wise exact: the same deltas), one evaluation a step fewer."""
    d = 8
    v_init = torch.full((d,), 2.0)
    target = torch.linspace(-1, 1, d) * 2.5
    zo = dataclasses.replace(FZOO.zo, n_dirs=4, max_steps=200, max_evals=100_000, lr=0.05)
    recipe = EditRecipe(zo, SuccessCriterion(0.5, 10.0))
    graphs = {flag: Quadratic(target) for flag in (False, True)}
    runs = {flag: search_value(g, v_init, ObjectiveConfig(), recipe, backend, reuse_checked=flag)
            for flag, g in graphs.items()}
    twice, once = runs[False], runs[True]
    steps = len(once.losses)
    assert steps > 5 and once.status == twice.status == "SUCCESS_CHECK"
    assert torch.equal(once.delta, twice.delta) and once.losses == twice.losses
    assert twice.evals - once.evals == steps - 1  # every step after the first: its base row was checked
    assert once.distinct_evals == twice.distinct_evals - (steps - 1) and once.calls == twice.calls
    assert graphs[True].calls[:4] == [zo.K, 1, zo.K - 1, 1]  # the first step runs its base row
    # check_at "base": the check reads the step's own row 0 — the same delta, no check evaluates anything
    g = Quadratic(target)
    based = search_value(g, v_init, ObjectiveConfig(), EditRecipe(dataclasses.replace(zo, check_at="base"),
                                                                  recipe.success), backend)
    assert based.status == "SUCCESS_CHECK" and torch.equal(based.delta, once.delta)
    assert len(based.losses) == steps + 1 and set(g.calls) == {zo.K} and based.evals == zo.K * (steps + 1)
    # a row-sampled step scores another objective: nothing is reused there
    sampled = search_value(Quadratic(target), v_init, ObjectiveConfig(), recipe, backend, step_graph=Quadratic(target))
    assert sampled.evals == twice.evals and torch.equal(sampled.delta, twice.delta)


def test_the_paper_estimators_rows_are_never_taken_from_the_check():
    """Only a row 0 equal to the checked delta is reused: the paper's rows start at x + h·u."""
    d = 8
    target = torch.linspace(-1, 1, d) * 2.5
    zo = dataclasses.replace(PAPER.zo, max_steps=30, max_evals=100_000, loss_tol=0.0)
    recipe = EditRecipe(zo, SuccessCriterion(0.5, 10.0))
    g_on, g_off = Quadratic(target), Quadratic(target)
    on = search_value(g_on, torch.full((d,), 2.0), ObjectiveConfig(), recipe, "python")
    off = search_value(g_off, torch.full((d,), 2.0), ObjectiveConfig(), recipe, "python", reuse_checked=False)
    assert torch.equal(on.delta, off.delta) and on.status == off.status == "MAX_STEPS"
    assert [c for c in g_on.calls if c > 1] == [c for c in g_off.calls if c > 1] == [zo.K] * 30  # whole steps
    # the one point scored twice without reuse: the last step's delta, checked in the loop and again at the end
    assert off.evals - on.evals == 1 and g_off.calls[-2:] == [1, 1] and g_on.calls[-1] == 1


@pytest.mark.parametrize("backend", ["python", "native"])
def test_settle_keeps_shorter_passing_deltas_and_stops_at_the_first_round_that_is_not(backend):
    """``recipe.settle`` (recipes.Settle): from a first success far off the target's axis, each round
    shrinks the kept delta and searches again; a round's delta is kept only if it passes and is
    shorter, so the result passes the rule, is shorter than the first success, and costs counted
    evaluations; rounds 0 is the search without the phase."""
    d = 8
    v_init = torch.full((d,), 2.0)
    target = torch.zeros(d); target[0] = 3.0
    start = target.clone(); start[1] = 1.9  # inside the success ball (radius 2 around the target), off axis
    zo = dataclasses.replace(FZOO.zo, n_dirs=4, max_steps=50, max_evals=10_000, lr=0.05)
    plain = search_value(Quadratic(target), v_init, ObjectiveConfig(), EditRecipe(zo, SuccessCriterion(0.5, 10.0)),
                         backend, start=start)
    from mobiedit.recipes import Settle

    graph = Quadratic(target)
    settled = search_value(graph, v_init, ObjectiveConfig(),
                           EditRecipe(zo, SuccessCriterion(0.5, 10.0), Settle(rounds=6, shrink=0.8, steps=5)),
                           backend, start=start)
    assert plain.settled == 0 and settled.succeeded and settled.status == plain.status == "SUCCESS_CHECK"
    assert settled.found_norm == pytest.approx(float(plain.delta.norm()), rel=1e-5)
    assert 1 <= settled.settled <= 6
    assert float(settled.delta.norm()) < 0.85 * settled.found_norm
    assert float((settled.delta - target).norm()) <= 2.0 + 1e-5  # the kept delta passes the rule
    assert settled.evals == sum(graph.calls) > plain.evals and len(settled.losses) > len(plain.losses)
    for bad in ({"rounds": -1}, {"rounds": 2, "steps": 0}, {"shrink": 1.0}, {"shrink": True}):
        with pytest.raises(ConfigError, match="settle"):
            Settle(**bad)
