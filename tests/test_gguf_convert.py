"""GGUF -> Hugging Face conversion (:func:`mobiedit.checkpoints.convert_gguf`), on a tiny Llama GGUF
written here in llama.cpp's layout: its metadata keys, its tensor names, its byte-level BPE
tokenizer metadata and its row permutation of ``attn_q`` / ``attn_k`` (which transformers undoes on
load). Pinned: the converted folder reloads with a plain ``from_pretrained`` and gives the source
model's logits, its config has no ``quantization_config``, the tied ``lm_head.weight`` is not
written, its tokenizer encodes as the GGUF's does, and the conversion writes nothing to the
terminal (transformers' GGUF reader runs a raw tqdm bar that ``disable_progress_bar`` misses)."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from mobiedit.checkpoints import convert_gguf

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = ["The capital of France is Paris.", "The Eiffel Tower stands in Paris, France.",
          "Danielle Darrieux spoke French; her mother tongue was French.",
          "Toko Yasuda plays the guitar and the piano.", "The Space Needle is in Seattle."] * 4
TEXT = "<|im_start|>The tower in Paris is tall.<|im_end|>"
HIDDEN, LAYERS, HEADS, KV_HEADS, FFN, CONTEXT = 64, 2, 4, 2, 128, 256


def _bpe():
    """A tiny byte-level BPE (the three SmolLM2 control tokens first, then the 256 bytes)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=SPECIALS, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(CORPUS, trainer)
    return tk


def _llama(vocab_size: int):
    """A tiny tied-embedding Llama with weights large enough that the logits differ clearly."""
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(vocab_size=vocab_size, hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
                      num_attention_heads=HEADS, num_key_value_heads=KV_HEADS, max_position_embeddings=CONTEXT,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2, pad_token_id=2)
    model = LlamaForCausalLM(cfg).eval()
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            noise = torch.randn(p.shape, generator=gen)
            p.copy_(1 + 0.1 * noise if name.endswith("norm.weight") else 0.15 * noise)
    return model


def _permute(w: np.ndarray, n_head: int, n_head_kv: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute`` (convert_hf_to_gguf.py) of the q / k projection rows."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _gguf_tensors(model) -> dict[str, np.ndarray]:
    """The model's state dict under llama.cpp's names (no ``output.weight``: the embedding is tied)."""
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    out = {"token_embd.weight": sd["model.embed_tokens.weight"], "output_norm.weight": sd["model.norm.weight"]}
    names = {"input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k",
             "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output", "post_attention_layernorm": "ffn_norm",
             "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for i in range(LAYERS):
        for hf, gg in names.items():
            w = sd[f"model.layers.{i}.{hf}.weight"]
            if gg == "attn_q":
                w = _permute(w, HEADS, HEADS)
            elif gg == "attn_k":
                w = _permute(w, HEADS, KV_HEADS)
            out[f"blk.{i}.{gg}.weight"] = w
    return out


def _write_gguf(path, model, tk) -> None:
    """``path``: a GGUF with the metadata a llama.cpp conversion of SmolLM2 carries, in F32."""
    import gguf

    vocab = sorted(tk.get_vocab().items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab]
    merges = [" ".join(m) if isinstance(m, list) else m for m in json.loads(tk.to_str())["model"]["merges"]]
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name("tiny-llama")
    w.add_block_count(LAYERS)
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_rope_freq_base(float(model.config.rope_parameters["rope_theta"]))
    w.add_layer_norm_rms_eps(model.config.rms_norm_eps)
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(len(tokens))
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_add_space_prefix(False)
    w.add_add_bos_token(False)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("smollm")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in SPECIALS else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_pad_token_id(2)
    for name, tensor in _gguf_tensors(model).items():
        w.add_tensor(name, tensor)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.fixture(scope="module")
def source(tmp_path_factory):
    """(model, byte-level BPE, path of the GGUF written from them)."""
    tk = _bpe()
    model = _llama(tk.get_vocab_size())
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf"
    _write_gguf(path, model, tk)
    return model, tk, path


@pytest.fixture(scope="module")
def converted(source, tmp_path_factory):
    out = tmp_path_factory.mktemp("hf")
    convert_gguf(source[2], out)
    return out


def test_the_folder_reloads_plainly_with_the_source_logits(source, converted):
    from transformers import AutoModelForCausalLM

    model, tk, _ = source
    loaded = AutoModelForCausalLM.from_pretrained(converted, dtype=torch.float32).eval()
    assert loaded.config.tie_word_embeddings
    ids = torch.tensor([tk.encode(TEXT).ids])
    with torch.no_grad():
        want, got = model(ids).logits, loaded(ids).logits
    assert want.abs().max() > 1  # the logits say something: a wrong permutation could not hide
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_the_config_has_no_quantization_config(converted):
    cfg = json.loads((converted / "config.json").read_text())
    assert "quantization_config" not in cfg
    assert (cfg["model_type"], cfg["num_key_value_heads"], cfg["head_dim"]) == ("llama", KV_HEADS, HIDDEN // HEADS)


def test_the_tied_lm_head_is_not_written(converted):
    from safetensors import safe_open

    with safe_open(str(converted / "model.safetensors"), "pt") as f:
        keys = set(f.keys())
    assert "lm_head.weight" not in keys
    assert "model.embed_tokens.weight" in keys and len(keys) == 2 + 9 * LAYERS


def test_the_saved_tokenizer_encodes_as_the_gguf_one(source, converted):
    from transformers import AutoTokenizer

    _, tk, path = source
    from_gguf = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    saved = AutoTokenizer.from_pretrained(converted)
    ids = saved(TEXT)["input_ids"]
    assert ids == from_gguf(TEXT)["input_ids"] == tk.encode(TEXT).ids
    assert ids[0] == SPECIALS.index("<|im_start|>")  # a control token stays whole
    assert saved.decode(ids) == TEXT


def test_the_conversion_writes_nothing_to_the_terminal(source, tmp_path, capfd):
    capfd.readouterr()
    convert_gguf(source[2], tmp_path)
    out, err = capfd.readouterr()
    assert (out, err) == ("", "")
