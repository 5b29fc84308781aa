"""The bundle's chat template (export/chat.py): rendering equals transformers' apply_chat_template,
the manifest entry and its default follow the model profile, ``--chat`` / ``--no-chat`` resolution,
and prompt ids of a bundle in both modes. No model is run: a small trained BPE tokenizer carries
SmolLM2-135M-Instruct's ChatML template (the Android fixture's copy) or a Qwen-style one."""
from __future__ import annotations

from pathlib import Path

import pytest

from mobiedit.errors import BundleError, ConfigError
from mobiedit.profile import ModelProfile, write_profile

from mobiedit.export.bundle import Bundle
from mobiedit.export.chat import CHAT_TEMPLATE, render_chat, save_chat_template, use_chat
from mobiedit.export.ops import prompt_ids

ROOT = Path(__file__).resolve().parents[1]
SMOL = (ROOT / "android_demo/app/src/test/resources/fixtures/smollm2/chat_template.jinja").read_text(encoding="utf-8")
#: whitespace control, escapes and loop controls, as Qwen-style templates use them
QWEN_LIKE = ("{%- for message in messages %}{%- if loop.first and message['role'] != 'system' %}"
             "{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
             "{%- if message['role'] == 'tool' %}{% continue %}{% endif %}"
             "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
             "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
CONVERSATIONS = [
    ([{"role": "user", "content": "Where is the Eiffel Tower?"}], True),
    ([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Où est la tour Eiffel ? 🗼"}], True),
    ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"},
      {"role": "user", "content": "  tabs\tand\nnewlines "}], False),
]


@pytest.fixture(scope="module")
def chat_tok(tmp_path_factory):
    """A trained byte-level BPE tokenizer with ChatML's special tokens and SmolLM2's template."""
    from transformers import PreTrainedTokenizerFast

    from mobiedit.factlm.train import train_tokenizer

    base = train_tokenizer(["The Eiffel Tower is located in Paris.", "Where is the Eiffel Tower?"] * 20, 300)
    tok = PreTrainedTokenizerFast(tokenizer_object=base.backend_tokenizer, bos_token="<s>", eos_token="<|im_end|>",
                                  pad_token="<pad>")
    tok.add_special_tokens({"additional_special_tokens": ["<|im_start|>", "<|im_end|>"]})
    tok.chat_template = SMOL
    return tok


def _ids(x) -> list[int]:
    return list(x["input_ids"] if hasattr(x, "keys") else x)


@pytest.mark.parametrize("template", [SMOL, QWEN_LIKE], ids=["smollm2", "qwen_like"])
def test_render_equals_transformers_apply_chat_template(chat_tok, template):
    for msgs, gen in CONVERSATIONS:
        want = chat_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen, chat_template=template)
        assert render_chat(template, msgs, add_generation_prompt=gen) == want


def test_a_template_that_raises_is_a_named_error():
    with pytest.raises(BundleError, match="does not render") as e:
        render_chat("{{ raise_exception('roles must alternate') }}", [{"role": "user", "content": "x"}])
    assert "--no-chat" in e.value.fix


def _bundle_dir(tok, tmp: Path, model_dir: Path) -> tuple[Path, dict | None]:
    tmp.mkdir(parents=True, exist_ok=True)
    tok.backend_tokenizer.save(str(tmp / "tokenizer.json"))
    return tmp, save_chat_template(tok, tmp, model_dir)


def test_manifest_entry_default_follows_the_model_profile(chat_tok, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    _, entry = _bundle_dir(chat_tok, tmp_path / "b0", model)
    assert entry == {"template_file": CHAT_TEMPLATE, "default": False}  # no profile: plain by default
    assert (tmp_path / "b0" / CHAT_TEMPLATE).read_text(encoding="utf-8") == SMOL
    write_profile(model, ModelProfile(edit_layer=5, chat_template=True))
    assert _bundle_dir(chat_tok, tmp_path / "b1", model)[1]["default"] is True
    write_profile(model, ModelProfile(edit_layer=5, chat_template=False))
    assert _bundle_dir(chat_tok, tmp_path / "b2", model)[1]["default"] is False


def test_no_template_no_entry(tmp_path):
    from mobiedit.factlm.train import train_tokenizer

    tok = train_tokenizer(["plain text only"] * 5, 280)
    assert not tok.chat_template
    assert _bundle_dir(tok, tmp_path / "b", tmp_path)[1] is None
    assert not (tmp_path / "b" / CHAT_TEMPLATE).exists()


def test_chat_flag_resolution():
    entry = {"template_file": CHAT_TEMPLATE, "default": True}
    assert use_chat({"chat": entry}, None) is True
    assert use_chat({"chat": {**entry, "default": False}}, None) is False
    assert use_chat({"chat": entry}, False) is False
    assert use_chat({"chat": None}, None) is False and use_chat({}, False) is False
    with pytest.raises(ConfigError) as e:
        use_chat({"chat": None}, True)
    assert e.value.where == "--chat" and "--no-chat" in e.value.fix


def _manifest(tok, entry: dict | None, files: dict) -> dict:
    return {"special_tokens": {"bos": tok.bos_token_id, "eos": tok.eos_token_id, "pad": tok.pad_token_id},
            "chat": entry, "files": files}


def test_prompt_ids_chat_and_plain(chat_tok, tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    write_profile(model, ModelProfile(edit_layer=5, chat_template=True))
    folder, entry = _bundle_dir(chat_tok, tmp_path / "b", model)
    files = {n: {"sha256": "-", "bytes": 0} for n in ("tokenizer.json", CHAT_TEMPLATE)}
    b = Bundle(folder, _manifest(chat_tok, entry, files))
    prompt = "Where is the Eiffel Tower?"
    want_chat = _ids(chat_tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                                  tokenize=True))
    assert prompt_ids(b, prompt) == want_chat  # the manifest's default: chat
    assert prompt_ids(b, prompt, chat=True) == want_chat
    assert prompt_ids(b, prompt, chat=False) == chat_tok(prompt)["input_ids"]
    assert want_chat[0] == chat_tok.convert_tokens_to_ids("<|im_start|>")
    unlisted = Bundle(folder, _manifest(chat_tok, entry, {"tokenizer.json": files["tokenizer.json"]}))
    with pytest.raises(BundleError, match="not listed"):
        prompt_ids(unlisted, prompt, chat=True)

