"""The export check's perturbation is the bundle search's own: ``edit_correlation`` feeds the edit
program deltas ``scale · (x0 + h·z)`` at the h it is given (the exporter passes the recipe's
``zo.h``, :func:`mobiedit.export.recipe.model_recipe`), x0 = 0 and of norm √d in turn, and records h."""
from __future__ import annotations

import math

import pytest
import torch

from mobiedit.export.calibration import edit_correlation
from mobiedit.export.runtime import Program
from mobiedit.profile import ModelProfile, write_profile


class _Linear(Program):
    """losses = deltas · w (+ a fixed rounding step when ``step``): keeps the deltas it was fed."""

    def __init__(self, w: torch.Tensor, step: float = 0.0) -> None:
        super().__init__(["deltas", "wd_scale"], ["losses"])
        self.w, self.step, self.fed = w, step, []

    def run(self, feed):
        self.fed.append(feed["deltas"].clone())
        losses = feed["deltas"] @ self.w
        if self.step:
            losses = torch.round(losses / self.step) * self.step
        return {"losses": losses}


@pytest.mark.parametrize("h", [0.05, 0.2])
def test_the_check_perturbs_at_the_h_it_is_given_and_records_it(h):
    K, d, scale = 64, 256, 3.0
    w = torch.randn(d, generator=torch.Generator().manual_seed(0))
    ref = _Linear(w)
    out = edit_correlation(ref, _Linear(w), {"wd_scale": torch.tensor(0.0)}, K, d, scale, draws=2, h=h)
    assert out["h"] == h and out["network_min"] > 0.999
    first, second = ref.fed
    # draw 0 starts at x0 = 0: each row is scale·h·z, ‖z‖ ≈ √d
    assert first.norm(dim=-1).mean() == pytest.approx(scale * h * math.sqrt(d), rel=0.1)
    # draw 1 starts at a random x0 of norm √d: the rows' spread around their mean is still scale·h·z
    spread = (second - second.mean(0)).norm(dim=-1).mean()
    assert spread == pytest.approx(scale * h * math.sqrt(d), rel=0.1)
    assert second.mean(0).norm() == pytest.approx(scale * math.sqrt(d), rel=0.1)


def test_a_coarse_program_reads_worse_at_a_small_h_than_a_large_one():
    """Why the h matters: a fixed rounding of the losses is noise at small steps, not at large ones."""
    K, d, scale = 64, 256, 1.0
    w = torch.randn(d, generator=torch.Generator().manual_seed(0)) / math.sqrt(d)
    corr = {h: edit_correlation(_Linear(w), _Linear(w, step=0.2), {"wd_scale": torch.tensor(0.0)}, K, d, scale,
                                draws=2, h=h)["network_min"] for h in (0.05, 0.5)}
    assert corr[0.05] < 0.9 < corr[0.5]


def test_the_exported_recipe_takes_the_profiles_h(model_copy):
    from mobiedit.export.recipe import model_recipe, shipped_recipe

    assert model_recipe(model_copy, 17) == shipped_recipe(17)  # no profile search: the shipped recipe's h
    write_profile(model_copy, ModelProfile(edit_layer=0, methods={"mobiedit": {"zo": {"lr": 2.0, "h": 0.2}}}))
    rec = model_recipe(model_copy, 17)
    assert (rec.zo.h, rec.zo.lr, rec.zo.n_dirs) == (0.2, 2.0, 16)
