"""Per-edit inputs: ROME's context templates and the rewrite / KL prompt batch."""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..prompts import TargetBatch, make_batch
from ..requests import EditRequest
from .config import ContextConfig, ObjectiveConfig


def generate_context_templates(model, tok, cfg: ContextConfig, generator: torch.Generator) -> list[str]:
    """``["{}"]`` plus generated prefixes ``"<text>. {}"`` (ROME's ``get_context_templates``).

    Prefixes are sampled (top-k 5) from ``generator`` so they are reproducible from the seed.
    """
    out = ["{}"]
    device = next(model.parameters()).device
    for length, count in cfg.lengths:
        for i in range(count):
            seed = cfg.seeds[i % len(cfg.seeds)]
            ids = torch.tensor([tok(seed)["input_ids"]], device=device)
            with torch.no_grad():
                for _ in range(length):
                    logits = model(input_ids=ids, logits_to_keep=1).logits[0, -1].float()
                    top = torch.topk(logits, 5)
                    probs = torch.softmax(top.values, -1).cpu()
                    j = torch.multinomial(probs, 1, generator=generator).item()
                    ids = torch.cat([ids, top.indices[j].view(1, 1)], dim=1)
            text = tok.decode(ids[0], skip_special_tokens=True)
            text = text.replace("{", " ").replace("}", " ").strip()
            out.append(text + ". {}")
    return out


@dataclass
class EditInputs:
    """One edit's prompt batch: rows [0, n_rewrite) are rewrite prompts with the target,
    rows [n_rewrite, B) are KL prompts (no target). ``subject_idx`` is set for every row."""

    batch: TargetBatch
    n_rewrite: int
    target_len: int

    @property
    def kl_rows(self) -> slice:
        return slice(self.n_rewrite, self.batch.input_ids.shape[0])


def build_edit_inputs(tok, request: EditRequest, templates: list[str], objective: ObjectiveConfig) -> EditInputs:
    """Rewrite prompts ``template.format(prompt) + target[:-1]`` and the KL prompt, in one batch."""
    from ..prompts import target_ids

    rewrite = [t.replace("{}", request.rewrite_prompt) for t in templates]
    kl = [objective.kl_prompt.replace("{}", request.subject)]
    n_t = len(target_ids(tok, request.target_new))
    rb = make_batch(tok, rewrite, [request.target_new] * len(rewrite), subject=request.subject)
    kb = make_batch(tok, kl, None, subject=request.subject)
    T = max(rb.input_ids.shape[1], kb.input_ids.shape[1])

    def pad(t: torch.Tensor, value: int) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, T - t.shape[1]), value=value)

    pad_id = tok.pad_token_id if tok.pad_token_id is not None else 0
    batch = TargetBatch(
        input_ids=torch.cat([pad(rb.input_ids, pad_id), pad(kb.input_ids, pad_id)]),
        attention_mask=torch.cat([pad(rb.attention_mask, 0), pad(kb.attention_mask, 0)]),
        subject_idx=torch.cat([rb.subject_idx, kb.subject_idx]),
        labels=torch.cat([pad(rb.labels, -100), pad(kb.labels, -100)]),
        last_idx=torch.cat([rb.last_idx, kb.last_idx]),
    )
    return EditInputs(batch=batch, n_rewrite=len(rewrite), target_len=n_t)
