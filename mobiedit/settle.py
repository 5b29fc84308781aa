"""The settings of the forward-only search's settle phase (:class:`Settle`), validated on construction.

The phase itself is :func:`mobiedit.driver.settle_value` (the app's ``SettlePhase``). The settings
live here, below the algorithm, so that a model profile (:mod:`mobiedit.profile`) can validate its
``settle`` section with the same rule as the recipe (:mod:`mobiedit.recipes`, which re-exports
:class:`Settle`) and the bundle's manifest (``export.recipe``).
"""
from __future__ import annotations

from dataclasses import dataclass

from mobiedit.errors import ConfigError

__all__ = ["Settle"]


@dataclass(frozen=True)
class Settle:
    """What the search does after its first success (:func:`mobiedit.driver.settle_value`): up to
    ``rounds`` times, shrink the passing delta by ``shrink`` and search again from there (at most
    ``steps`` steps, the same success rule and stop); a round's delta is kept only if it passes and
    is shorter than the last kept one, and the first round that does not ends the phase.

    The search otherwise stops where its rule first holds, so whatever its steps added that the
    edit does not need stays in the delta; ROME's Adam keeps stepping under its decay term after the
    target is reached, which this gives a forward-only search. ``rounds`` 0 (the default): off.
    """

    rounds: int = 0
    shrink: float = 0.8
    steps: int = 20

    def __post_init__(self) -> None:
        for name, hi, fix in (("rounds", 100, "e.g. settle.rounds: 3 (0: off)"), ("steps", 10_000, "e.g. settle.steps: 20")):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= hi:
                raise ConfigError(f"settle.{name} must be an integer in [0, {hi}], got {v!r}", where=f"settle.{name}",
                                  fix=fix)
        if self.rounds and self.steps < 1:
            raise ConfigError("settle.steps must be >= 1 when settle.rounds > 0", where="settle.steps",
                              fix="e.g. settle.steps: 20")
        if isinstance(self.shrink, bool) or not isinstance(self.shrink, (int, float)) or not 0 < self.shrink < 1:
            raise ConfigError(f"settle.shrink must be a number in (0, 1), got {self.shrink!r}", where="settle.shrink",
                              fix="e.g. settle.shrink: 0.8 (each round starts from 0.8 times the kept delta)")
