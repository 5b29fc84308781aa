"""Stale protected keys (issue 16, ``update.key_refresh``): with ``spread`` > 1 each edit's lower
part moves the keys of the layers above it, so the keys earlier edits were solved at are no longer
what the model produces at their subjects. ``key_refresh`` n re-reads them every n applied edits;
0 keeps them as solved. The lowest written layer's keys never move (nothing below it is written)."""
from __future__ import annotations

import shutil

import pytest
import torch

from mobiedit.editing.config import ContextConfig, ROMEConfig, UpdateConfig
from mobiedit.errors import ConfigError


def test_key_refresh_is_checked():
    assert UpdateConfig().key_refresh == 0
    for bad in (-1, 1.5, True, "10"):
        with pytest.raises(ConfigError, match="update.key_refresh"):
            UpdateConfig(key_refresh=bad)


def _run(tiny_llama_dir, tmp_path, refresh: int, n: int):
    """``n`` forced sequential spread-2 rows-protect edits at layers 0-1; (model, ctx)."""
    from mobiedit.journal import Journal
    from mobiedit.models import load_model
    from mobiedit.requests import EditRequest
    from mobiedit.session import edit_sequential, prepare

    folder = tmp_path / f"m{refresh}_{n}"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "mobiedit.json").write_text('{"edit_layer": 1, "stats_corpus": "counterfact"}')
    lm = load_model(folder)
    cfg = ROMEConfig(layer=1, steps=8, context=ContextConfig(lengths=((4, 2),)),
                     update=UpdateConfig(spread=2, rule="rows-protect", key_refresh=refresh))
    ctx = prepare(lm, cfg, seed=0)
    subjects = (("Anna Lee", "tennis"), ("Bo Chen", "hockey"), ("Cy Diaz", "rugby"), ("Di Eve", "chess"))
    reqs = [EditRequest(case_id=f"s{i}", prompt="{} plays the sport", subject=s, target_new=t, target_true="golf")
            for i, (s, t) in enumerate(subjects[:n])]
    edit_sequential(lm, reqs, cfg, ctx, Journal.open(folder / "journal"), force=True, progress=False)
    assert ctx.edited_requests[1] == ctx.edited_requests[0] == reqs  # in step with the keys
    return lm, ctx


def _fresh(lm, ctx, layer: int) -> torch.Tensor:
    from mobiedit.editing.compute_k import template_keys

    return torch.stack([template_keys(lm.model, lm.family, layer, lm.tokenizer, ctx.templates, r.rewrite_prompt,
                                      r.subject).mean(0) for r in ctx.edited_requests[layer]])


def _rel(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a - b).norm(dim=1) / b.norm(dim=1)


def test_solved_keys_go_stale_above_the_lowest_layer_and_a_refresh_reads_them_current(tiny_llama_dir, tmp_path):
    lm, ctx = _run(tiny_llama_dir, tmp_path, 0, 3)
    solved = torch.stack(ctx.edited_keys[1])
    stale = _rel(solved, _fresh(lm, ctx, 1))
    assert float(stale[0]) > 1e-6 and float(stale[-1]) < 1e-7  # the last edit's key was read after its own lower part
    assert torch.allclose(torch.stack(ctx.edited_keys[0]), _fresh(lm, ctx, 0), atol=1e-5)  # nothing below layer 0

    lm, ctx = _run(tiny_llama_dir, tmp_path, 1, 3)
    assert torch.equal(torch.stack(ctx.edited_keys[1]), _fresh(lm, ctx, 1))


def test_a_refresh_every_two_edits_leaves_the_keys_stale_in_between(tiny_llama_dir, tmp_path):
    lm, ctx = _run(tiny_llama_dir, tmp_path, 2, 3)  # re-read after edit 2; edit 3's lower part moved them
    assert float(_rel(torch.stack(ctx.edited_keys[1]), _fresh(lm, ctx, 1))[0]) > 1e-6
    lm, ctx = _run(tiny_llama_dir, tmp_path, 2, 4)  # re-read after edit 4
    assert torch.equal(torch.stack(ctx.edited_keys[1]), _fresh(lm, ctx, 1))


def test_editing_an_edited_folder_again_protects_its_edits_at_every_written_layer(tiny_llama_dir, tmp_path, monkeypatch):
    """A spread config writes layers 0 and 1; an edit of the folder those edits were saved in solves
    against the folder's earlier edits at both layers, each key with its request."""
    from mobiedit import api, session
    from mobiedit.requests import EditRequest

    folder = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "mobiedit.json").write_text('{"edit_layer": 1, "stats_corpus": "counterfact"}')
    cfg = ROMEConfig(layer=1, steps=8, context=ContextConfig(lengths=((4, 2),)),
                     update=UpdateConfig(spread=2, rule="rows-protect", key_refresh=1))
    reqs = [EditRequest(case_id=f"s{i}", prompt="{} plays the sport", subject=s, target_new=t, target_true="golf")
            for i, (s, t) in enumerate((("Anna Lee", "tennis"), ("Bo Chen", "hockey"), ("Cy Diaz", "rugby")))]
    api.edit(folder, reqs[:2], config=cfg, out=tmp_path / "e1", force=True)
    seeded = []

    def seeding(lm, ctx, journal, layer):
        n = session.seed_edited_keys(lm, ctx, journal, layer)
        seeded.append((layer, n, [r.case_id for r in ctx.edited_requests[layer]]))
        return n

    monkeypatch.setattr(api, "seed_edited_keys", seeding)
    api.edit(tmp_path / "e1", reqs[2:], config=cfg, out=tmp_path / "e2", force=True)
    assert seeded == [(0, 2, ["s0", "s1"]), (1, 2, ["s0", "s1"])]
