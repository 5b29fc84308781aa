"""Teacher-forced scoring of a prompt + target through a bundle's own ``prefill`` + ``decode``
programs, with the bundle's active journal edits in the slots: :mod:`mobiedit.evaluate`'s token
accuracy (``teacher_forced`` / ``token_acc``) computed on the phone's programs instead of the eager model.

Contract of :meth:`BundleScorer.score`: tokenised as :mod:`mobiedit.prompts` (the prompt with the
tokenizer's special tokens, ``" " + target`` without); the prompt goes through
:func:`~mobiedit.export.generate.prefill`, then each target token but the last through one
``decode`` call; returns the logits at the positions that predict each target token — the HF
model's teacher-forced logits with the same slot edits in its weights, up to float rounding.
Reads the bundle, never writes it.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from mobiedit.errors import BundleError
from mobiedit.prompts import prompt_ids, target_ids

from .bundle import Bundle
from .generate import CacheShape, prefill


@dataclass(frozen=True)
class Tf:
    """One teacher-forced pass: the logits at the target positions [len(targets), V] and the target ids."""

    logits: torch.Tensor
    targets: list[int]

    def argmax(self) -> list[int]:
        return self.logits.argmax(-1).tolist()

    def acc(self) -> float:
        """Share of target tokens that are the argmax (:func:`mobiedit.evaluate.token_acc`)."""
        return sum(int(a == t) for a, t in zip(self.argmax(), self.targets)) / len(self.targets)


class BundleScorer:
    """Scores prompts on ``bundle`` (see the module docstring); the slots hold the journal's active
    edits as of the last :meth:`refresh` (the constructor's included)."""

    def __init__(self, bundle: Bundle) -> None:
        m, d = bundle.manifest, bundle.manifest["dims"]
        self.b, self.tok = bundle, bundle.tokenizer()
        self.shape = CacheShape(d["num_layers"], d["num_kv_heads"], m["shapes"]["max_seq_len"], d["head_dim"],
                                m["shapes"]["prefill_chunk"])
        self.slots: dict[str, torch.Tensor] = {}
        self.refresh()

    def refresh(self) -> None:
        """Load the journal's active edits into the slots (call after an edit or an undo)."""
        u, w = self.b.slots()
        self.slots = {"slot_u": u, "slot_w": w}

    def slots_empty(self) -> bool:
        return not any(bool(t.abs().sum()) for t in self.slots.values())

    def score(self, prompt: str, target: str) -> Tf:
        """The teacher-forced pass of ``prompt`` + ``target``. Raises BundleError when they do not
        fit the bundle's KV cache."""
        pid, tid = prompt_ids(self.tok, prompt), target_ids(self.tok, target)
        if len(pid) + len(tid) - 1 > self.shape.max_seq_len:
            raise BundleError(f"prompt + target are {len(pid) + len(tid) - 1} tokens, the cache holds "
                              f"{self.shape.max_seq_len}", where=f"prompt {prompt!r}",
                              fix="re-export with a larger --max-seq-len or use shorter requests")
        cache = self.shape.empty()
        out = [prefill(self.b.program("prefill"), pid, cache, self.shape, self.slots)]
        dec = self.b.program("decode")
        for j, tok in enumerate(tid[:-1]):
            pos = len(pid) + j
            step = dec.run({"tokens": torch.tensor([[tok]]), "start": torch.tensor([pos]),
                            "logit_index": torch.tensor([0]), "kv_cache": cache, **self.slots})
            cache[:, :, pos] = step["new_kv"][:, :, 0]
            out.append(step["logits"][0])
        return Tf(torch.stack(out), tid)

    def neighbours(self, req) -> list[Tf]:
        """The passes of ``req``'s neighbourhood prompts with their own answers."""
        return [self.score(p, a) for p, a in zip(req.neighborhood_prompts, req.neighborhood_answers)]
