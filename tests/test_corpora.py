"""Natural-text corpora from the gensim wheel, and the choice of the key-statistics text."""
from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import shutil

import pytest

from mobiedit import corpora
from mobiedit.errors import ConfigError
from mobiedit.factlm.pipeline import CORPUS_FILE
from mobiedit.models import LoadedModel
from mobiedit.stats_corpus import STATS_MAX_LEN, stats_texts_for


def test_clean_paragraphs_strips_leftover_markup():
    page = ("'''Anarchism''' is a ''political'' philosophy ( ) .\n\n==History==\n\n* a list item\n"
            "It began early.\nIt went on.\n\n{| table\n")
    assert corpora.clean_paragraphs(page) == ["Anarchism is a political philosophy.", "It began early. It went on."]
    assert corpora.clean_paragraphs("#REDIRECT History of Afghanistan") == []


def test_missing_package_names_the_pip_command(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match=r"pip install gensim==4\.4\.0"):
        corpora.data_file(corpora.LEE_FILE)


def test_wikipedia_and_heldout_texts(cache_dir):
    paras = corpora.wikipedia_texts()
    cached = list((cache_dir / "corpora").glob(f"{corpora.WIKI_FILE}.*.txt"))
    assert len(cached) == 1  # keyed by the source file's sha256
    assert corpora.wikipedia_texts() == paras  # read back from the cache
    words = sum(len(p.split()) for p in paras)
    assert len(paras) > 3000 and words > 300_000
    assert all(len(p.split()) >= 20 and "'''" not in p and not p.startswith("=") for p in paras)
    assert paras[0].startswith("Anarchism is a political philosophy")
    lee = corpora.heldout_texts()
    assert 250 <= len(lee) <= 350 and sum(len(p.split()) for p in lee) > 50_000
    assert not set(lee) & set(paras)


def _lm(folder) -> LoadedModel:
    from transformers import AutoTokenizer

    return LoadedModel(model=None, tokenizer=AutoTokenizer.from_pretrained(folder), family=None, path=folder)


def test_chunk_texts_bounds_and_budget(tiny_llama_dir):
    tok = _lm(tiny_llama_dir).tokenizer
    texts = ["short one.", "word " * 700, "another short text."]
    chunks = corpora.chunk_texts(tok, texts, max_tokens=64, pack=True)
    lens = [len(tok(c, add_special_tokens=False)["input_ids"]) for c in chunks]
    assert max(lens) <= 64 and len(chunks) > 5
    assert chunks[0].startswith("short one.") and chunks[-1].endswith("another short text.")
    assert corpora.chunk_texts(tok, texts, max_tokens=64, pack=False)[0] == "short one."
    assert len(corpora.chunk_texts(tok, texts, max_tokens=64, budget=100)) < len(chunks)


def test_stats_texts_follow_the_profile(tiny_llama_dir, tmp_path, cache_dir):
    folder = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, folder)
    lm = _lm(folder)
    wiki = stats_texts_for(lm, budget=20_000)  # no profile, no corpus file: Wikipedia
    n = sum(len(lm.tokenizer(t)["input_ids"]) for t in wiki)
    assert 20_000 <= n <= 20_000 + 2 * STATS_MAX_LEN
    assert max(len(lm.tokenizer(t)["input_ids"]) for t in wiki) <= STATS_MAX_LEN
    (folder / CORPUS_FILE).write_text("a fact.\nanother fact.\n" + "long " * 600)
    assert stats_texts_for(lm, budget=20_000) == wiki  # no profile: Wikipedia even beside a corpus file
    (folder / "mobiedit.json").write_text(json.dumps({"edit_layer": 1, "stats_corpus": f"file:{CORPUS_FILE}"}))
    lines = stats_texts_for(lm)  # the profile names the file: its lines, long lines cut
    assert lines[:2] == ["a fact.", "another fact."] and len(lines) > 3
    assert max(len(lm.tokenizer(t)["input_ids"]) for t in lines) <= STATS_MAX_LEN
    for src, first in (("counterfact", None), ("wikipedia", wiki[0]), (f"file:{CORPUS_FILE}", "a fact.")):
        (folder / "mobiedit.json").write_text(json.dumps({"edit_layer": 1, "stats_corpus": src}))
        got = stats_texts_for(lm, budget=20_000)
        assert got[0] == first if first else len(got) == 4000
    (folder / "mobiedit.json").write_text(json.dumps({"edit_layer": 1, "stats_corpus": "file:missing.txt"}))
    with pytest.raises(ConfigError, match="missing.txt"):
        stats_texts_for(lm)


def test_key_statistics_record_their_corpus(tiny_llama_dir, tmp_path, cache_dir):
    """C from Wikipedia text: the cache file names its corpus (package, version, licence) and the
    token count it averaged over; a second call reads the cache (same tensor)."""
    import torch

    from mobiedit.models import load_model
    from mobiedit.editing.stats import cached_second_moment, stats_metadata, stats_path
    from mobiedit.stats_corpus import stats_corpus_for

    folder = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, folder)
    lm = load_model(folder)
    corpus = stats_corpus_for(lm, budget=3_000)
    assert corpus.source["name"] == "wikipedia" and corpus.source["licence"] == "CC BY-SA"
    assert corpus.source["package"] == "gensim" and corpus.source["version"] == importlib.metadata.version("gensim")
    c = cached_second_moment(lm.model, lm.family, 0, lm.tokenizer, corpus.texts, folder, source=corpus.source)
    path = stats_path(folder, 0, corpus.texts, lm.family)
    meta = stats_metadata(path)
    n = sum(len(lm.tokenizer(t, truncation=True, max_length=256)["input_ids"]) for t in corpus.texts)
    assert meta["n_tokens"] == n and n >= 3_000 and meta["n_texts"] == len(corpus.texts)
    assert meta["source"] == corpus.source and meta["layer"] == 0 and len(meta["corpus_sha256"]) == 64
    assert torch.equal(cached_second_moment(lm.model, lm.family, 0, lm.tokenizer, corpus.texts, folder), c)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "no-mom2", "nan", "not-square"])
def test_damaged_key_statistics_cache_is_recomputed(tiny_llama_dir, tmp_path, monkeypatch, caplog, damage):
    """A cached C that cannot stand for the statistics (a torn or foreign file, a missing tensor,
    non-finite or non-square values) is a cache miss: recomputed, logged, and the file rewritten —
    never the library's SafetensorError / KeyError, never a NaN matrix handed to the solve."""
    import json as _json
    import logging

    import torch
    from safetensors.torch import load_file, save_file

    from mobiedit.editing.stats import cached_second_moment, stats_metadata, stats_path
    from mobiedit.models import load_model

    folder = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, folder)
    lm = load_model(folder)
    texts = ["The capital of France is Paris.", "A cat sat on the mat, and then it slept."] * 3
    # a fresh cache per case: C computed here, not read from another case's file (whose memory map
    # the damage below would pull from under the tensor)
    monkeypatch.setenv("MOBIEDIT_CACHE", str(tmp_path / "cache"))
    c = cached_second_moment(lm.model, lm.family, 0, lm.tokenizer, texts, folder, source={"name": "t"})
    path = stats_path(folder, 0, texts, lm.family)
    good = path.read_bytes()
    meta = {"mobiedit": _json.dumps({"source": {"name": "t"}, "n_tokens": 1})}
    bad = tmp_path / "bad.safetensors"
    if damage == "truncated":
        bad.write_bytes(good[: len(good) // 2])
    elif damage == "garbage":
        bad.write_bytes(b"not a safetensors file at all" * 10)
    elif damage == "no-mom2":
        save_file({"other": torch.zeros(2)}, str(bad), metadata=meta)
    elif damage == "nan":
        save_file({"mom2": torch.full_like(c, float("nan"))}, str(bad), metadata=meta)
    else:
        save_file({"mom2": torch.zeros(3, 5)}, str(bad), metadata=meta)
    bad.replace(path)
    with caplog.at_level(logging.INFO, logger="mobiedit.editing.stats"):
        again = cached_second_moment(lm.model, lm.family, 0, lm.tokenizer, texts, folder, source={"name": "t"})
    assert torch.equal(again, c)
    assert any("recomputing" in r.getMessage() for r in caplog.records)
    assert torch.equal(load_file(str(path))["mom2"], c) and stats_metadata(path)["source"] == {"name": "t"}
