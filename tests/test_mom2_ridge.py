"""``mom2_ridge`` as a norm constraint on the rank-one update (issue 16, the ENCORE probe): its field
is checked by name in both methods' configs, and a larger ridge gives a write direction ``w``
(scaled to ``wᵀk = 1``, as the update uses it) of smaller norm, tending to ROME without C."""
from __future__ import annotations

import math

import pytest
import torch

from mobiedit.editing.config import ROMEConfig
from mobiedit.editing.update import solve_c
from mobiedit.errors import ConfigError
from mobiedit.methods.mobiedit import MobiEditConfig


@pytest.mark.parametrize("bad", [-1e-3, math.nan, math.inf, True, "1"])
def test_mom2_ridge_names_the_field_in_both_methods(bad):
    for make, where in ((lambda: ROMEConfig(mom2_ridge=bad), "rome.mom2_ridge"),
                        (lambda: MobiEditConfig(mom2_ridge=bad), "mobiedit.mom2_ridge")):
        with pytest.raises(ConfigError) as e:
            make()
        assert where in str(e.value)


def test_zero_ridge_is_accepted():
    assert ROMEConfig(mom2_ridge=0.0).mom2_ridge == 0.0
    assert MobiEditConfig(mom2_ridge=0.0).mom2_ridge == 0.0


def test_a_larger_ridge_gives_a_smaller_update_direction_that_tends_to_the_key():
    g = torch.Generator().manual_seed(0)
    d = 32
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    c = (a @ a.T / d + 1e-2 * torch.eye(d, dtype=torch.float64)).float()  # eigenvalues spread ~1e-2 .. 4
    k = torch.randn(d, generator=g)
    norms, cosines = [], []
    for ridge in (1e-4, 1e-1, 1.0, 1e2):
        w = solve_c(c, k, ridge)
        w = w / torch.dot(w, k)  # the update's scale: wᵀk = 1
        norms.append(float(w.norm()))
        cosines.append(float(torch.nn.functional.cosine_similarity(w, k, dim=0)))
    assert all(x > y for x, y in zip(norms, norms[1:])), norms
    assert all(x < y for x, y in zip(cosines, cosines[1:])), cosines
    assert cosines[-1] > 0.99 and abs(norms[-1] - 1 / float(k.norm())) < 0.02 / float(k.norm())
