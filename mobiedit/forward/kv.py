"""The K/V cache object the forward-only graphs hand to HF attention as ``past_key_values``.

HF's decoder attention modules (Llama, Qwen2/3, Mistral, Gemma-3, GPT-2 in transformers 5.x) use
one method of the cache: ``key, value = past_key_values.update(key, value, self.layer_idx)``, the
keys/values to attend over. :class:`RecordingKV` answers it with fixed past keys/values prepended
(or the new ones alone for a layer without a past) and stores nothing in the past, so a graph
stays a pure function of its inputs. Used by :class:`~mobiedit.forward.graph.PrefixGraph` (the
edit's prefix K/V, nothing recorded) and the exported programs (:mod:`mobiedit.export.graphs`,
which read the new K/V back from :attr:`RecordingKV.new`).
"""
from __future__ import annotations

import torch

__all__ = ["RecordingKV"]


class RecordingKV:
    """The cache object HF attention calls: ``update(k, v, i)`` returns ``past[i] ⊕ (k, v)`` along
    the sequence axis (or just ``(k, v)`` without a past) and, when ``record``, records ``(k, v)``
    in :attr:`new` (layer index → the tensors passed in)."""

    def __init__(self, past: dict[int, tuple[torch.Tensor, torch.Tensor]] | None = None, record: bool = True) -> None:
        self.past = past or {}
        self.record = record
        self.new: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def update(self, k: torch.Tensor, v: torch.Tensor, layer_idx: int, *args, **kwargs
               ) -> tuple[torch.Tensor, torch.Tensor]:
        if self.record:
            self.new[layer_idx] = (k, v)
        if layer_idx not in self.past:
            return k, v
        pk, pv = self.past[layer_idx]
        return torch.cat([pk, k], dim=2), torch.cat([pv, v], dim=2)
