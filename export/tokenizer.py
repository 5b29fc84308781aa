"""The bundle's tokenizer: ``tokenizers.Tokenizer`` behind the small part of the HF tokenizer API
that prompt building uses (``tok(text, add_special_tokens=...)["input_ids"]``, ``pad_token_id``,
``decode``), so :func:`mobiedit.editing.context.build_edit_inputs` runs on a phone without
``transformers``.
"""
from __future__ import annotations

from pathlib import Path

from mobiedit.errors import BundleError


class BundleTokenizer:
    """Adapter over ``tokenizers.Tokenizer.from_file(tokenizer.json)``."""

    def __init__(self, path: str | Path, special: dict[str, int | None]) -> None:
        from tokenizers import Tokenizer

        try:
            self.tk = Tokenizer.from_file(str(path))
        except Exception as e:  # tokenizers raises a bare Exception on malformed files
            raise BundleError(f"cannot read the tokenizer ({str(e)[:200]})", where=str(path),
                              fix="re-export the bundle") from None
        self.bos_token_id = special.get("bos")
        self.eos_token_id = special.get("eos")
        self.pad_token_id = special.get("pad") if special.get("pad") is not None else self.eos_token_id

    def __call__(self, text: str, add_special_tokens: bool = True, **_ignored) -> dict[str, list[int]]:
        return {"input_ids": self.tk.encode(text, add_special_tokens=add_special_tokens).ids}

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        return self.tk.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token(self, token_id: int | None) -> str:
        """The token string of ``token_id`` ("" for None or an unknown id)."""
        return (self.tk.id_to_token(token_id) or "") if token_id is not None else ""


def save_tokenizer(hf_tokenizer, path: Path, probes: list[str]) -> dict[str, int | None]:
    """Write ``hf_tokenizer``'s backend as ``tokenizer.json`` and check that it encodes ``probes``
    exactly like the HF tokenizer. Returns the special token ids {bos, eos, pad}."""
    backend = getattr(hf_tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise BundleError("the model's tokenizer has no fast (tokenizers) backend", where="tokenizer",
                          fix="export a model with a tokenizer.json")
    backend.save(str(path))
    special = {"bos": hf_tokenizer.bos_token_id, "eos": hf_tokenizer.eos_token_id, "pad": hf_tokenizer.pad_token_id}
    mine = BundleTokenizer(path, special)
    for text in probes:
        for add in (True, False):
            want = hf_tokenizer(text, add_special_tokens=add)["input_ids"]
            got = mine(text, add_special_tokens=add)["input_ids"]
            if want != got:
                raise BundleError(f"tokenizer.json encodes {text!r} as {got[:8]}…, the HF tokenizer as {want[:8]}…",
                                  where="tokenizer", fix="the HF tokenizer adds behaviour outside tokenizer.json")
    return special
