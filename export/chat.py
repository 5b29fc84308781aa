"""The bundle's chat template: stored at export, rendered by ``mobiedit run`` (and the app).

An instruct model answers best through its chat template (SmolLM2-135M-Instruct: ChatML with a
default system turn). The bundle carries it so a phone needs nothing else:

* ``chat_template.jinja`` — the HF tokenizer's template text, verbatim (listed in ``files``);
* manifest ``chat`` — ``{"template_file": "chat_template.jinja", "default": bool}``. ``default``
  is what ``mobiedit run`` does without ``--chat`` / ``--no-chat``: true when the model profile
  (``mobiedit.json``) says ``chat_template: true``; false without a profile or when it says false
  (a base model's template is then only used on request). A bundle without a template has
  ``"chat": null`` and always answers plain text.

:func:`render_chat` renders like transformers' ``apply_chat_template(tokenize=False)`` (same jinja
environment settings); the rendered text is tokenized without the post-processor's special
tokens, as ``apply_chat_template(tokenize=True)`` does.
"""
from __future__ import annotations

import logging
from pathlib import Path

from mobiedit.errors import BundleError, ConfigError

log = logging.getLogger(__name__)

CHAT_TEMPLATE = "chat_template.jinja"


def chat_default(model_dir: str | Path) -> bool:
    """Whether a bundle of ``model_dir`` answers through its chat template by default: the model
    profile's ``chat_template`` (False when the model has no profile)."""
    from mobiedit.profile import read_profile

    prof = read_profile(model_dir)
    if prof is None:
        log.warning("%s has no model profile (mobiedit.json): the bundle answers plain text by default "
                    "(`mobiedit run --chat` uses the chat template)", model_dir)
        return False
    return bool(prof.chat_template)


def save_chat_template(hf_tokenizer, folder: Path, model_dir: str | Path) -> dict | None:
    """Write the tokenizer's chat template into ``folder`` (which already holds the bundle's
    ``tokenizer.json``); returns the manifest's ``chat`` entry, its ``default`` from the profile of
    ``model_dir`` (:func:`chat_default`), or None when the tokenizer has no template. Refuses a
    template whose rendering + tokenization differs from transformers' ``apply_chat_template``."""
    template = getattr(hf_tokenizer, "chat_template", None)
    if isinstance(template, dict):  # named templates: the HF default is the one called "default"
        template = template.get("default")
    if not isinstance(template, str) or not template.strip():
        return None
    (folder / CHAT_TEMPLATE).write_text(template, encoding="utf-8")
    _check_against_hf(hf_tokenizer, template, folder)
    return {"template_file": CHAT_TEMPLATE, "default": chat_default(model_dir)}


def _check_against_hf(hf_tokenizer, template: str, folder: Path) -> None:
    """The bundle's rendering + ``tokenizer.json`` (already in ``folder``) must give the ids of the
    HF tokenizer's ``apply_chat_template(tokenize=True)`` on a probe conversation."""
    from .tokenizer import BundleTokenizer

    msgs = [{"role": "user", "content": "Where is the Eiffel Tower? Réponds en une phrase."}]
    text = render_chat(template, msgs, _token(hf_tokenizer, "bos_token"), _token(hf_tokenizer, "eos_token"))
    want = hf_tokenizer.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
    want = list(want["input_ids"] if hasattr(want, "keys") else want)
    tk = BundleTokenizer(folder / "tokenizer.json", {})
    got = tk(text, add_special_tokens=False)["input_ids"]
    if got != want:
        raise BundleError(f"the chat template renders to ids {got[:12]}…, transformers' apply_chat_template to "
                          f"{want[:12]}…", where=f"{CHAT_TEMPLATE} / tokenizer.json",
                          fix="the model's template needs features this renderer lacks; export with a plain prompt")


def _token(tok, name: str) -> str:
    value = getattr(tok, name, None)
    return value if isinstance(value, str) else ""


def render_chat(template: str, messages: list[dict[str, str]], bos_token: str = "", eos_token: str = "",
                add_generation_prompt: bool = True) -> str:
    """``template`` rendered for ``messages`` (``[{"role", "content"}]``) like transformers'
    ``apply_chat_template(..., tokenize=False)``: sandboxed jinja, ``trim_blocks`` / ``lstrip_blocks``,
    ``raise_exception`` available to the template."""
    from jinja2 import TemplateError
    from jinja2.ext import loopcontrols
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str):
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols])
    env.globals["raise_exception"] = raise_exception
    try:
        return env.from_string(template).render(messages=messages, add_generation_prompt=add_generation_prompt,
                                                bos_token=bos_token, eos_token=eos_token)
    except TemplateError as e:
        raise BundleError(f"the chat template does not render ({e})", where=CHAT_TEMPLATE,
                          fix="re-export the bundle, or answer without it (--no-chat)") from None


def use_chat(manifest: dict, chat: bool | None) -> bool:
    """Resolve ``--chat`` / ``--no-chat`` (None: the manifest's default). Asking for chat from a
    bundle without a template is a named error."""
    entry = manifest.get("chat")
    if chat is None:
        return bool(entry and entry.get("default"))
    if chat and not entry:
        raise ConfigError("this bundle carries no chat template", where="--chat",
                          fix="use --no-chat, or re-export a model whose tokenizer has a chat template")
    return chat


def chat_prompt_text(bundle_path: Path, manifest: dict, prompt: str, special: dict[str, str]) -> str:
    """The user turn ``prompt`` rendered with the bundle's template and the generation prompt."""
    entry = manifest["chat"]
    name = entry.get("template_file")
    if not isinstance(name, str) or name not in manifest.get("files", {}):
        raise BundleError(f"chat template file {name!r} is not listed in files",
                          where=f"{bundle_path / 'manifest.json'}, field 'chat.template_file'", fix="re-export the bundle")
    template = (bundle_path / name).read_text(encoding="utf-8")
    return render_chat(template, [{"role": "user", "content": prompt}], special.get("bos", ""), special.get("eos", ""))
