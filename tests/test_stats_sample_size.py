"""tools/stats_sample_size.py: ROME's direction scored by its leak on held-out keys. With the held-out
second moment equal to the true one, the true C's direction leaks least (it is the minimiser of
wᵀCw with wᵀk = 1), so a C estimated from few samples must score a ratio above 1."""
from __future__ import annotations

import json

import torch

from tools.stats_sample_size import leak_report, plot


def _sample_c(a: torch.Tensor, n: int, gen: torch.Generator) -> torch.Tensor:
    x = torch.randn(n, a.shape[0], generator=gen, dtype=torch.float64) @ a.T
    return (x.T @ x / n).float()


def test_the_true_statistics_leak_least_and_small_samples_more(tmp_path):
    gen = torch.Generator().manual_seed(0)
    d = 24
    a = torch.randn(d, d, generator=gen, dtype=torch.float64) * torch.logspace(0, -2, d, dtype=torch.float64)
    c_true = (a @ a.T).float()
    keys = torch.randn(5, d, generator=gen)
    cs = {40: _sample_c(a, 40, gen), 400: _sample_c(a, 400, gen), 10**9: c_true}
    rows = {r["budget_tokens"]: r for r in leak_report(cs, c_true, keys, ridge=1e-6)}
    assert abs(rows[10**9]["leak_ratio_to_largest_median"] - 1) < 1e-9
    assert abs(rows[10**9]["cos_w_with_largest_min"] - 1) < 1e-9
    assert rows[40]["leak_ratio_to_largest_median"] > rows[400]["leak_ratio_to_largest_median"] > 1
    assert rows[40]["cos_w_with_largest_median"] < rows[400]["cos_w_with_largest_median"] < 1
    png = tmp_path / "leak.png"
    plot([{"model": "/x/toy-model", "layer": 0, "d_in": d, "rows": list(rows.values())}], str(png))
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    json.dumps(list(rows.values()))  # the report is plain JSON
