"""Context templates are generated once per (weights, tokenizer, config, generator state): a cache
hit returns what generating returns and leaves the generator where generating would; another
seed or config is another entry; a damaged entry is regenerated, never trusted."""
from __future__ import annotations

import json

import pytest
import torch

import mobiedit.editing.template_cache as tc
from mobiedit.editing.config import ContextConfig
from mobiedit.editing.context import generate_context_templates
from mobiedit.models import load_model

CFG = ContextConfig(lengths=((3, 2), (4, 1)))


@pytest.fixture()
def lm(tiny_llama_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MOBIEDIT_CACHE", str(tmp_path / "cache"))
    return load_model(tiny_llama_dir)


def _no_generation(*a, **k):
    raise AssertionError("generated although cached")


def test_a_hit_returns_the_generated_templates_and_the_generator_state(lm, monkeypatch):
    g0 = torch.Generator().manual_seed(3)
    fresh = generate_context_templates(lm.model, lm.tokenizer, CFG, g0)
    g1 = torch.Generator().manual_seed(3)
    assert tc.cached_context_templates(lm.model, lm.tokenizer, CFG, g1, lm.path) == fresh  # a miss: generated
    assert torch.equal(g1.get_state(), g0.get_state())
    monkeypatch.setattr(tc, "generate_context_templates", _no_generation)
    g2 = torch.Generator().manual_seed(3)
    assert tc.cached_context_templates(lm.model, lm.tokenizer, CFG, g2, lm.path) == fresh  # a hit
    assert torch.equal(g2.get_state(), g0.get_state())  # the next draw is the one generating would leave
    assert torch.rand(4, generator=g2).tolist() == torch.rand(4, generator=g0).tolist()
    with pytest.raises(AssertionError, match="generated although cached"):  # another seed: another entry
        tc.cached_context_templates(lm.model, lm.tokenizer, CFG, torch.Generator().manual_seed(4), lm.path)
    with pytest.raises(AssertionError, match="generated although cached"):  # another config: another entry
        tc.cached_context_templates(lm.model, lm.tokenizer, ContextConfig(lengths=((3, 3),)),
                                    torch.Generator().manual_seed(3), lm.path)


@pytest.mark.parametrize("damage", ["{not json", json.dumps({"format": 1, "templates": ["{}"], "rng_after": ""}),
                                    json.dumps({"format": 1, "templates": ["a", "b. {}", "c. {}", "d. {}"],
                                                "rng_after": "AAAA"})])
def test_a_damaged_entry_is_regenerated_and_replaced(lm, damage, caplog):
    g = torch.Generator().manual_seed(5)
    path = tc.templates_path(lm.path, CFG, g)
    want = tc.cached_context_templates(lm.model, lm.tokenizer, CFG, g, lm.path)
    path.write_text(damage)
    g2 = torch.Generator().manual_seed(5)
    assert tc.cached_context_templates(lm.model, lm.tokenizer, CFG, g2, lm.path) == want
    assert "generating" in caplog.text
    assert json.loads(path.read_text())["templates"] == want  # replaced by a good entry
    assert tc.cached_entries(lm.path) == [path]


def test_the_tokenizer_is_part_of_the_key(lm, tmp_path):
    import shutil

    other = tmp_path / "other"
    shutil.copytree(lm.path, other)
    g = torch.Generator().manual_seed(0)
    assert tc.templates_path(other, CFG, g) == tc.templates_path(lm.path, CFG, g)
    cfg_file = other / "tokenizer_config.json"
    cfg_file.write_text(cfg_file.read_text().replace("{", '{"x_note": 1, ', 1))
    assert tc.templates_path(other, CFG, g) != tc.templates_path(lm.path, CFG, g)
    assert tc.templates_path(tmp_path, CFG, g) is None  # no weights: nothing to key on, no cache


def test_an_unwritable_cache_costs_the_next_run_not_this_edit(tiny_llama_dir, tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "cache"
    blocker.write_text("a file where the cache folder should be")
    monkeypatch.setenv("MOBIEDIT_CACHE", str(blocker))
    lm = load_model(tiny_llama_dir)
    want = generate_context_templates(lm.model, lm.tokenizer, CFG, torch.Generator().manual_seed(1))
    assert tc.cached_context_templates(lm.model, lm.tokenizer, CFG, torch.Generator().manual_seed(1), lm.path) == want
    assert "not cached" in caplog.text
