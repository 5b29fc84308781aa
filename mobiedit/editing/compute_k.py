"""Keys of the edited matrix: the input of ``mlp_out`` at the subject's last token (ROME's ``compute_u``)."""
from __future__ import annotations

import torch

from ..families import Family, get_module
from ..hooks import record
from ..prompts import make_batch


def keys_at_subject(model, family: Family, layer: int, tok, prompts: list[str], subject: str
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and outputs of ``mlp_out`` at the subject's last token of each prompt: ([n, d_in], [n, d_out])."""
    b = make_batch(tok, prompts, None, subject=subject)
    mod = get_module(model, family.mlp_out, layer)
    dev = next(model.parameters()).device
    with torch.no_grad(), record(mod, stop=True) as rec:  # layers above l are not needed
        model(input_ids=b.input_ids.to(dev), attention_mask=b.attention_mask.to(dev))
    rows = torch.arange(len(prompts))
    idx = b.subject_idx.to(dev)
    return rec.input[rows, idx].float(), rec.output[rows, idx].float()


def row_keys(model, family: Family, layer: int, batch) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and outputs of ``mlp_out`` at each row's subject token of a prompt ``batch``:
    ([B, d_in], [B, d_out]) float32."""
    mod = get_module(model, family.mlp_out, layer)
    dev = next(model.parameters()).device
    with torch.no_grad(), record(mod, stop=True) as rec:
        model(input_ids=batch.input_ids.to(dev), attention_mask=batch.attention_mask.to(dev))
    rows = torch.arange(batch.input_ids.shape[0], device=dev)
    idx = batch.subject_idx.to(dev)
    return rec.input[rows, idx].float(), rec.output[rows, idx].float()


def template_keys(model, family: Family, layer: int, tok, templates: list[str], rewrite_prompt: str,
                  subject: str) -> torch.Tensor:
    """[n_templates, d_in] the key of ``subject`` in each context template around ``rewrite_prompt``
    (their mean is the edit's k̄)."""
    return keys_at_subject(model, family, layer, tok, [t.replace("{}", rewrite_prompt) for t in templates], subject)[0]


def compute_keys(model, family: Family, layer: int, tok, templates: list[str], rewrite_prompt: str,
                 subject: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(K [n_templates, d_in], k_cur, out_cur): the key in each context template, and the key and
    ``mlp_out`` output at the plain rewrite prompt."""
    ks = template_keys(model, family, layer, tok, templates, rewrite_prompt, subject)
    k_cur, out_cur = keys_at_subject(model, family, layer, tok, [rewrite_prompt], subject)
    return ks, k_cur[0], out_cur[0]


def compute_key(model, family: Family, layer: int, tok, templates: list[str], rewrite_prompt: str,
                subject: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(k̄, k_cur, out_cur): the key averaged over context templates, and the key and ``mlp_out``
    output at the plain rewrite prompt (ROME uses k̄ for the direction, k_cur for the scale)."""
    ks, k_cur, out_cur = compute_keys(model, family, layer, tok, templates, rewrite_prompt, subject)
    return ks.mean(0), k_cur, out_cur

