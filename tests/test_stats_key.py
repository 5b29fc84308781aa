"""The key statistics' cache key covers exactly the weights a layer's keys depend on: editing that
layer's MLP output (what ROME writes) or any layer above keeps it — a saved edited model, re-edited or
exported, reads the statistics of the model it came from — and a change below or beside it does not."""
from __future__ import annotations

import shutil

import torch
from safetensors.torch import load_file, save_file

import mobiedit.editing.stats as stats
from mobiedit.models import load_model


def _changed(src, dst, name):
    shutil.copytree(src, dst)
    f = next(dst.glob("*.safetensors"))
    sd = load_file(str(f))
    sd[name] = sd[name] + 0.5
    save_file(sd, str(f), metadata={"format": "pt"})
    return dst


def test_the_digest_follows_what_the_keys_depend_on(tiny_llama_dir, tmp_path):
    fam = load_model(tiny_llama_dir).family
    base = stats.key_inputs_digest(tiny_llama_dir, fam, 0)
    written = _changed(tiny_llama_dir, tmp_path / "written", "model.layers.0.mlp.down_proj.weight")
    above = _changed(tiny_llama_dir, tmp_path / "above", "model.layers.1.mlp.up_proj.weight")
    beside = _changed(tiny_llama_dir, tmp_path / "beside", "model.layers.0.mlp.up_proj.weight")
    assert stats.key_inputs_digest(written, fam, 0) == base == stats.key_inputs_digest(above, fam, 0)
    assert stats.key_inputs_digest(beside, fam, 0) != base  # the key is up/gate's input: same layer, other matrix
    assert stats.key_inputs_digest(above, fam, 1) != stats.key_inputs_digest(tiny_llama_dir, fam, 1)
    assert stats.key_inputs_digest(written, fam, 1) != stats.key_inputs_digest(tiny_llama_dir, fam, 1)  # below layer 1


def test_an_edited_copy_reads_the_statistics_of_its_source(tiny_llama_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("MOBIEDIT_CACHE", str(tmp_path / "cache"))
    texts = ["The capital of France is Paris.", "A cat sat on the mat, and then it slept."] * 3
    lm = load_model(tiny_llama_dir)
    c = stats.cached_second_moment(lm.model, lm.family, 0, lm.tokenizer, texts, tiny_llama_dir)
    edited = _changed(tiny_llama_dir, tmp_path / "edited", "model.layers.0.mlp.down_proj.weight")
    lm2 = load_model(edited)
    calls = []
    real = stats.second_moment_counted
    monkeypatch.setattr(stats, "second_moment_counted", lambda *a, **k: calls.append(1) or real(*a, **k))
    assert torch.equal(stats.cached_second_moment(lm2.model, lm2.family, 0, lm2.tokenizer, texts, edited), c)
    assert not calls  # a hit: and it is the right C (the keys of layer 0 do not see its down_proj)
    assert torch.allclose(real(lm2.model, lm2.family, 0, lm2.tokenizer, texts)[0], c)


def test_a_tied_embedding_saved_under_the_heads_name_is_the_same_tensor(tiny_llama_dir, tmp_path):
    """safetensors' ``save_model`` (the demo's save of an edited model) keeps ``lm_head.weight`` of a
    tied pair where the converted checkpoint kept ``model.embed_tokens.weight``."""
    fam = load_model(tiny_llama_dir).family
    sd = load_file(str(next(tiny_llama_dir.glob("*.safetensors"))))
    emb = sd.pop("model.embed_tokens.weight")
    sd.pop("lm_head.weight", None)
    digests = []
    for name, tensor in (("model.embed_tokens.weight", emb), ("lm_head.weight", emb), ("lm_head.weight", emb + 1.0)):
        folder = tmp_path / f"m{len(digests)}"
        folder.mkdir()
        save_file(sd | {name: tensor}, str(folder / "model.safetensors"), metadata={"format": "pt"})
        digests.append(stats.key_inputs_digest(folder, fam, 0))
    assert digests[0] == digests[1]  # one tensor under either name
    assert digests[2] != digests[0]  # another embedding is another model
