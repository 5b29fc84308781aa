"""Greedy generation with the ``prefill`` / ``decode`` programs and a host-side static KV cache.

Contract of :func:`greedy_tokens`: the prompt is fed in chunks of C tokens (the last chunk padded;
only real positions are written to the cache), then one ``decode`` call per generated token. It
returns the generated ids (without the prompt), stopping at ``eos_id`` (included) or after
``max_new_tokens`` or when the cache is full. The result equals greedy decoding of the HF model
with the same rank-one slot edits applied to its weights (up to float rounding ties).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from mobiedit.errors import BundleError

from .runtime import Program


@dataclass(frozen=True)
class CacheShape:
    """KV-cache geometry: layers, KV heads, positions T, head size, prefill chunk C."""

    num_layers: int
    num_kv_heads: int
    max_seq_len: int
    head_dim: int
    chunk: int

    def empty(self) -> torch.Tensor:
        """[2L, Hkv, T, hd]: row 2i keys, 2i+1 values of layer i."""
        return torch.zeros(2 * self.num_layers, self.num_kv_heads, self.max_seq_len, self.head_dim)


def _scalar(v: int) -> torch.Tensor:
    return torch.tensor([v], dtype=torch.int64)


def prefill(program: Program, ids: list[int], cache: torch.Tensor, shape: CacheShape,
            slots: dict[str, torch.Tensor]) -> torch.Tensor:
    """Feed ``ids`` from position 0; fills ``cache`` in place; returns the last token's logits [V]."""
    C, logits = shape.chunk, None
    for start in range(0, len(ids), C):
        part = ids[start:start + C]
        tokens = torch.zeros(1, C, dtype=torch.int64)
        tokens[0, :len(part)] = torch.tensor(part, dtype=torch.int64)
        out = program.run({"tokens": tokens, "start": _scalar(start), "logit_index": _scalar(len(part) - 1),
                           "kv_cache": cache, **slots})
        cache[:, :, start:start + len(part)] = out["new_kv"][:, :, :len(part)]
        logits = out["logits"][0]
    return logits


def greedy_tokens(prefill_program: Program, decode_program: Program, prompt_ids: list[int], max_new_tokens: int,
                  shape: CacheShape, slot_u: torch.Tensor, slot_w: torch.Tensor, eos_id: int | None = None
                  ) -> list[int]:
    """Greedy continuation of ``prompt_ids`` (see the module docstring)."""
    T = shape.max_seq_len
    if not prompt_ids:
        raise BundleError("empty prompt", where="prompt", fix="pass at least one token of text")
    if len(prompt_ids) >= T:
        raise BundleError(f"prompt has {len(prompt_ids)} tokens, the cache holds {T}", where="prompt",
                          fix="shorten the prompt or re-export with a larger max_seq_len")
    slots = {"slot_u": slot_u, "slot_w": slot_w}
    cache = shape.empty()
    logits = prefill(prefill_program, prompt_ids, cache, shape, slots)
    out: list[int] = []
    pos = len(prompt_ids)
    while len(out) < max_new_tokens:
        tok = int(torch.argmax(logits))
        out.append(tok)
        if tok == eos_id or pos >= T or len(out) == max_new_tokens:
            break
        step = decode_program.run({"tokens": torch.tensor([[tok]], dtype=torch.int64), "start": _scalar(pos),
                                   "logit_index": _scalar(0), "kv_cache": cache, **slots})
        cache[:, :, pos] = step["new_kv"][:, :, 0]
        logits = step["logits"][0]
        pos += 1
    return out
