"""The success criterion shared by ROME, MobiEdit and the bundle path (editing.objective.edit_holds)."""
from __future__ import annotations

import pytest
import torch

from mobiedit.errors import ConfigError
from mobiedit.methods.mobiedit import MobiEditConfig
from mobiedit.editing.config import ROMEConfig
from mobiedit.editing.objective import edit_holds


def rows(n_true: int, n: int = 10, plain: bool = True) -> torch.Tensor:
    t = torch.zeros(n, dtype=torch.bool)
    t[:n_true] = True
    t[0] = plain
    return t


def test_plain_prompt_is_required():
    assert not edit_holds(rows(9, plain=False), 0.5)
    assert edit_holds(rows(1), 0.0)


def test_fraction_is_an_exact_count():
    assert edit_holds(rows(7), 0.7)          # 7/10 reaches exactly 0.7 (no float32 mean)
    assert not edit_holds(rows(6), 0.7)
    assert edit_holds(rows(10), 1.0) and not edit_holds(rows(9), 1.0)
    assert edit_holds(rows(16, n=21), 0.75) and not edit_holds(rows(15, n=21), 0.75)


@pytest.mark.parametrize("bad", [-0.1, 1.5])
def test_configs_reject_fractions_out_of_range(bad):
    with pytest.raises(ConfigError, match="success_fraction"):
        ROMEConfig(success_fraction=bad)
    with pytest.raises(ConfigError, match="success_fraction"):
        MobiEditConfig(success_fraction=bad)


def test_mobiedit_rejects_a_non_positive_margin():
    with pytest.raises(ConfigError, match="success_nll"):
        MobiEditConfig(success_nll=0.0)
