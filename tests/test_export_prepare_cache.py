"""The bundle export takes the eager path's key statistics and context templates — one definition,
one cache: a second export (or an export after `mobiedit edit`) computes neither again, and what it
ships is what the eager path uses."""
from __future__ import annotations

import torch

import mobiedit.editing.stats as stats
import mobiedit.editing.template_cache as tc
from mobiedit.export.config import EditSetup, ExportConfig
from mobiedit.export.pipeline import key_inverse
from mobiedit.models import load_model


def test_export_key_statistics_come_from_the_eager_cache(tiny_llama_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MOBIEDIT_CACHE", str(tmp_path / "cache"))
    lm = load_model(tiny_llama_dir)
    cfg = ExportConfig(edit=EditSetup(stats_limit=40))
    calls = []
    real = stats.second_moment_counted
    monkeypatch.setattr(stats, "second_moment_counted", lambda *a, **k: calls.append(1) or real(*a, **k))
    first = key_inverse(lm, 0, cfg)
    assert len(calls) == 1
    again = key_inverse(lm, 0, cfg)
    assert len(calls) == 1 and torch.equal(first, again)  # the second export reads the cache
    from mobiedit.stats_corpus import stats_corpus_for

    c = stats.cached_second_moment(lm.model, lm.family, 0, lm.tokenizer, stats_corpus_for(lm).texts[:40],
                                   lm.path).double()  # the eager path's C of the same texts: the same entry
    assert len(calls) == 1
    lam = cfg.edit.ridge * torch.diagonal(c).mean()
    assert torch.equal(first, torch.linalg.inv(c + lam * torch.eye(c.shape[0], dtype=torch.float64)).float())


def test_export_templates_are_the_eager_paths(tiny_llama_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MOBIEDIT_CACHE", str(tmp_path / "cache"))
    from mobiedit.export import pipeline

    cfg = ExportConfig(edit=EditSetup(stats_limit=40, layer=0))
    lm = load_model(tiny_llama_dir)
    eager = tc.cached_context_templates(lm.model, lm.tokenizer, cfg.edit.context,
                                        torch.Generator().manual_seed(cfg.edit.seed), lm.path)
    import mobiedit.editing.context as context

    def generated(*a, **k):
        raise AssertionError("the export generated its own templates")

    monkeypatch.setattr(tc, "generate_context_templates", generated)
    monkeypatch.setattr(context, "generate_context_templates", generated)
    prep = pipeline.prepare(tiny_llama_dir, cfg)
    assert prep.templates == eager
