"""The clamp ladder (issue 16): one definition of how a sequential edit looks for the smallest
value change that the edited model says, shared by the eager session
(:func:`mobiedit.session.run_method`) and the bundle path (:func:`mobiedit.export.ops.edit_bundle`).

An edit is tried with its value change clamped to each factor of the ladder in turn, smallest
first, until the written edit holds. Each rung searches from δ = 0; with warm rungs
(``update.ladder_warm_start``, off by default: over 50 sequential edits no cheaper and a little
worse, docs/reliability.md) a rung after the first starts from the previous rung's delta — inside
the smaller clamp, so inside this one — unless that search passed its own check and only the write
failed (the same start would stop at once at the same delta).

Why smaller changes first: on the fact LM a plain ROME edit at the full clamp moves earlier edits'
outputs most; after 50 sequential edits the ladder kept locality at 95 % where one clamp kept 55 %
(fact LM, docs/reliability.md, "Why, measured").
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Sequence, TypeVar

import torch

#: the ladder of a session that leaves more than one edit on one model, as fractions of the
#: objective's clamp (a bundle carries its own in its recipe, ``recipe.ladder.fractions``, written
#: from this at export)
SEQUENTIAL_LADDER = (0.5, 0.75, 1.0)
#: the number of edits on one model (its own included) from which an edit climbs the ladder by
#: default (a bundle's ``recipe.ladder.from_edits``)
LADDER_FROM_EDITS = 2

T = TypeVar("T")


def sequential_ladder(clamp: float, fractions: Sequence[float] = SEQUENTIAL_LADDER) -> tuple[float, ...]:
    """``fractions`` (default :data:`SEQUENTIAL_LADDER`) × ``clamp`` (the objective's
    ``clamp_norm_factor``)."""
    return tuple(f * clamp for f in fractions)


def needs_ladder(edits_on_model: int, from_edits: int = LADDER_FROM_EDITS) -> bool:
    """Whether a session that leaves ``edits_on_model`` edits on one model (its own and those
    already there) climbs the ladder by default: from ``from_edits`` on (default two)."""
    return edits_on_model >= from_edits


def warm_start(delta: torch.Tensor | None, loop_passed: bool | None) -> torch.Tensor | None:
    """Where the next rung's search starts after a rung that found ``delta``: there, unless its
    search passed its own check (``loop_passed`` True: only the write failed) or found nothing."""
    if delta is None or loop_passed:
        return None
    return delta


@dataclass(frozen=True)
class Rung(Generic[T]):
    """One try: the clamp ``factor``, whether it started ``warm``, and what the attempt returned."""

    factor: float
    warm: bool
    result: T


def climb(ladder: Sequence[float], attempt: Callable[[float, torch.Tensor | None], T],
          holds: Callable[[T], bool], start_of: Callable[[T], torch.Tensor | None]) -> list[Rung[T]]:
    """Try ``attempt(factor, start)`` for each factor of ``ladder`` in order until ``holds`` of its
    result; ``start`` is None for the first rung and ``start_of(previous result)`` after it
    (:func:`warm_start`, or ``lambda _: None`` for cold rungs). Returns every rung tried, in order;
    the last one held unless every rung failed. ``ladder`` must not be empty."""
    if not ladder:
        raise ValueError("climb needs at least one clamp factor")
    rungs: list[Rung[T]] = []
    for factor in ladder:
        start = start_of(rungs[-1].result) if rungs else None
        rungs.append(Rung(float(factor), start is not None, attempt(float(factor), start)))
        if holds(rungs[-1].result):
            break
    return rungs
