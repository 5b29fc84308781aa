"""Row-sampled steps (MobiEditConfig.step_rows, mobiedit.forward.rows): a step's loss on a subset
of the rewrite rows is the same objective over those rows, and the check still reads every row."""
from __future__ import annotations

import pytest
import torch

from mobiedit.editing.config import ContextConfig, ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs
from mobiedit.errors import ConfigError
from mobiedit.forward.graph import PrefixGraph
from mobiedit.forward.prefix import compute_prefix_state
from mobiedit.forward.rows import RowSampledGraph, sub_state
from mobiedit.methods.mobiedit import MobiEditConfig
from mobiedit.models import load_model
from mobiedit.requests import EditRequest

TEMPLATES = ["{}", "The man said that. {}", "Because of the rain in the city, {}", "I think {}", "So, {}"]
REQ = EditRequest(case_id="t", prompt="{} professionally plays the sport", subject="David Robinson",
                  target_new="baseball game", target_true="basketball")


def _graph(lm, cfg: ObjectiveConfig) -> PrefixGraph:
    inputs = build_edit_inputs(lm.tokenizer, REQ, TEMPLATES, cfg)
    return PrefixGraph(lm.model, lm.family, compute_prefix_state(lm.model, lm.family, 1, inputs), cfg)


def test_a_row_subset_scores_the_mean_of_its_rows(tiny_llama_dir):
    """Loss on rows {0, 2, 4} = the mean of the one-row losses (the KL and decay terms are shared);
    its per-row counts are the full graph's at those rows; all rows: the full graph bit for bit."""
    lm = load_model(tiny_llama_dir)
    cfg = ObjectiveConfig()
    g = _graph(lm, cfg)
    d = g.state.h_suffix.shape[-1]
    deltas = torch.randn(3, d, generator=torch.Generator().manual_seed(0)) * g.state.v_init.norm()
    full_loss, full_correct = g(deltas)

    def on(rows: list[int]):
        sub = PrefixGraph.__new__(PrefixGraph)
        sub.__dict__.update(g.__dict__)
        sub.state = sub_state(g.state, torch.tensor(rows))
        sub.n_rewrite = len(rows)
        return sub(deltas)

    loss, correct = on([0, 2, 4])
    singles = torch.stack([on([b])[0] for b in (0, 2, 4)])
    assert torch.allclose(loss, singles.mean(0), atol=1e-5, rtol=1e-6)
    assert torch.equal(correct, full_correct[:, [0, 2, 4]])
    every = on(list(range(len(TEMPLATES))))
    assert torch.equal(every[0], full_loss) and torch.equal(every[1], full_correct)
    assert not torch.allclose(loss, full_loss)  # a subset is another estimate, not the same number


def test_the_sampler_draws_the_plain_prompt_and_distinct_rows_reproducibly(tiny_llama_dir):
    lm = load_model(tiny_llama_dir)
    g = _graph(lm, ObjectiveConfig())
    s = RowSampledGraph(g, 3, torch.Generator().manual_seed(7))
    draws = [s.draw() for _ in range(20)]
    assert all(d[0] == 0 and len(set(d.tolist())) == 3 and d.max() < len(TEMPLATES) for d in draws)
    assert len({tuple(d.tolist()) for d in draws}) > 1  # a new subset each step
    again = RowSampledGraph(g, 3, torch.Generator().manual_seed(7))
    assert all(torch.equal(a, again.draw()) for a in draws)  # the explicit generator decides
    assert (s.n_rewrite, s.n_rows) == (3, 3 + g.n_rows - g.n_rewrite)
    assert RowSampledGraph(g, 99, torch.Generator()).rows == len(TEMPLATES)  # more than there are: every row


def test_step_rows_is_validated_and_an_edit_with_it_lands(small_fact_lm):
    from mobiedit.requests import bundled_path, load_requests
    from mobiedit.session import prepare, run_method

    for bad in (-1, 1.5, True):
        with pytest.raises(ConfigError, match="step_rows"):
            MobiEditConfig(step_rows=bad)
    with pytest.raises(ConfigError, match="prefix"):
        MobiEditConfig(step_rows=4, prefix_reuse=False)
    lm = load_model(small_fact_lm)
    req = load_requests(bundled_path("counterfact-edit-1k.json"))[0]
    ctx_cfg = ContextConfig(lengths=((5, 6),))  # 7 rewrite rows
    full_cfg = MobiEditConfig(layer=0, context=ctx_cfg)
    cfg = MobiEditConfig(layer=0, context=ctx_cfg, step_rows=3)
    ctx = prepare(lm, cfg, seed=0)
    out, full = run_method(lm, req, cfg, ctx), run_method(lm, req, full_cfg, ctx)
    assert full.succeeded and out.succeeded and out.write["holds"]  # judged on every row of the edited model
    # a step's K deltas ran 3 rewrite rows + the KL row, a check every row: fewer sequences an evaluation
    assert out.sequences / out.loss_evals < full.sequences / full.loss_evals
