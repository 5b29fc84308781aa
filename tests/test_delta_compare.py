"""tools/delta_compare.py (issue 18's direction probe): row parsing, and on the small fact LM the
records it reports — a delta per row, the cosines, the written edit's NLL along s·δ — with the
model's weights restored bit-exactly after every trial write."""
from __future__ import annotations

import math

import pytest
import torch

from mobiedit.errors import ConfigError
from tools.delta_compare import SCALES, compare, parse_row, summary


def test_parse_row():
    assert parse_row("a=rome-lean") == ("a", "rome-lean", ())
    assert parse_row("s=rome-lean:early_loss=0.5;objective.kl_prompt={} is") == \
        ("s", "rome-lean", (("early_loss", 0.5), ("objective.kl_prompt", "{} is")))
    for bad in ("rome-lean", "=rome", "a=", "a=rome:early_loss"):
        with pytest.raises(ConfigError) as e:
            parse_row(bad)
        assert e.value.where == "--row"


def test_compare_reports_each_row_and_restores_the_weights(small_fact_lm):
    from mobiedit.bench_rows import row_config
    from mobiedit.families import get_module
    from mobiedit.models import load_model
    from mobiedit.profile import resolve_layer
    from mobiedit.requests import bundled_path, load_requests

    lm = load_model(small_fact_lm)
    layer = resolve_layer(small_fact_lm, None)
    rows = {"a": row_config("rome", layer, 0, (("steps", 4),), small_fact_lm),
            "b": row_config("rome", layer, 0, (("steps", 4), ("objective.clamp_norm_factor", 1)), small_fact_lm)}
    reqs = load_requests(bundled_path("counterfact-edit-1k.json"))[:1]
    w0 = get_module(lm.model, lm.family.mlp_out, layer).weight.detach().clone()
    recs = compare(lm, reqs, rows, seed=0)
    assert torch.equal(get_module(lm.model, lm.family.mlp_out, layer).weight, w0)
    (rec,) = recs
    assert set(rec["rows"]) == {"a", "b"} and set(rec["cosine"]) == {"a|b"} and -1 <= rec["cosine"]["a|b"] <= 1
    ray = rec["rows"]["a"]["ray"]
    assert list(ray) == [f"{s:g}" for s in SCALES] and all(math.isfinite(v["plain"]) for v in ray.values())
    assert rec["rows"]["b"]["norm"] < rec["rows"]["a"]["norm"]  # the smaller clamp binds
    s = summary(recs)
    assert s["cosine_median"]["a|b"] == rec["cosine"]["a|b"] and s["rows"]["a"]["loss_evals_median"] == 5  # 4 steps: 5 forwards
