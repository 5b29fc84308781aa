"""The value-search objective — one definition shared by backprop ROME and the forward-only graph.

For a delta ``δ`` added to the edited layer's MLP output at the subject's last token:

    L(δ) = mean_p NLL(target | p; δ) / |target|  +  kl_factor · KL(P₀ ‖ P_δ on "{s} is a")
           + weight_decay · ‖δ‖ / ‖v_init‖²

(ROME's ``compute_v``: note the decay uses ‖δ‖, not ‖δ‖², as ROME does.)

The pieces every implementation of the objective calls — the logits-level :func:`value_loss`
(backprop ROME), the forward-only graphs (:mod:`mobiedit.forward.graph`) and the exported edit
program (:mod:`mobiedit.export.graphs`): :func:`kl_rows` (the KL term per KL row),
:func:`decay_term` / :func:`decay_coefficient` (the weight decay), :func:`edit_holds` and
:func:`within_margin` (the success rule).

"correct": the graphs return, per rewrite row, the COUNT of target tokens that are the
teacher-forced argmax (exact in float32); a row shows the whole target iff its count equals
``target_len`` (:func:`full_rows`). :func:`rows_correct` is the same verdict
computed from full logits, as bools (what backprop ROME has at hand).
"""
from __future__ import annotations

import torch

from .config import ObjectiveConfig
from .context import EditInputs


def kl_keep(inputs: EditInputs) -> torch.Tensor:
    """The sorted distinct positions of the KL read-outs: pass as ``logits_to_keep`` so that a
    reference forward computes logits [B, n_keep, V] there only, not [B, T, V]."""
    return torch.unique(inputs.batch.last_idx[inputs.n_rewrite:])


def kl_logprobs(logits: torch.Tensor, inputs: EditInputs, kept: bool = False) -> torch.Tensor:
    """Log-probs at the last token of each KL row: [..., n_kl, V]. ``kept``: the logits were
    computed with ``logits_to_keep=kl_keep(inputs)`` (positions indexed within the kept ones)."""
    b = inputs.batch
    rows = torch.arange(inputs.n_rewrite, b.input_ids.shape[0], device=logits.device)
    last = b.last_idx[inputs.n_rewrite:].to(logits.device)
    if kept:
        last = torch.searchsorted(kl_keep(inputs).to(logits.device), last)
    return torch.log_softmax(logits[..., rows, last, :].float(), dim=-1)


def nll_per_prompt(logits: torch.Tensor, inputs: EditInputs) -> torch.Tensor:
    """Mean-per-token target NLL of each rewrite row: [..., n_rewrite]."""
    n = inputs.n_rewrite
    labels = inputs.batch.labels[:n].to(logits.device)
    logp = torch.log_softmax(logits[..., :n, :, :].float(), dim=-1)
    mask = labels != -100
    lp = logp.gather(-1, labels.clamp(min=0).expand(*logp.shape[:-1]).unsqueeze(-1)).squeeze(-1)
    return -(lp * mask).sum(-1) / inputs.target_len


def kl_rows(kl_ref: torch.Tensor, new_logp: torch.Tensor) -> torch.Tensor:
    """KL(P₀ ‖ P_δ) per KL row: ``Σ_v exp(kl_ref) · (kl_ref − new_logp)`` over the last axis.

    ``kl_ref`` [n_kl, V] the unedited model's log-probs, ``new_logp`` [..., n_kl, V] the edited
    ones; returns [..., n_kl]. The callers reduce over the rows (a mean, or the exported program's
    ``kl_weight``-weighted sum)."""
    return (kl_ref.exp() * (kl_ref - new_logp)).sum(-1)


def decay_term(delta_norm, v_init_norm: float, cfg: ObjectiveConfig):
    """The objective's weight-decay term ``weight_decay · ‖δ‖ / ‖v_init‖²`` (tensor or float)."""
    return cfg.weight_decay * delta_norm / (v_init_norm ** 2)


def decay_coefficient(v_init_norm: float, cfg: ObjectiveConfig) -> float:
    """``weight_decay / ‖v_init‖²``: the decay term's coefficient, which a bundle's edit program
    takes as its ``wd_scale`` input and multiplies by ``‖δ‖`` (the same term, rounded in another
    order than :func:`decay_term`)."""
    return cfg.weight_decay / v_init_norm ** 2


def value_loss(logits: torch.Tensor, inputs: EditInputs, kl_ref: torch.Tensor, delta_norm: torch.Tensor,
               v_init_norm: float, cfg: ObjectiveConfig) -> torch.Tensor:
    """The objective for logits of shape [..., B, T, V]; returns a loss of shape [...].

    ``kl_ref`` are the unedited model's KL log-probs ([n_kl, V]); ``delta_norm`` has shape [...].
    """
    nll = nll_per_prompt(logits, inputs).mean(-1)
    kl = kl_rows(kl_ref, kl_logprobs(logits, inputs)).mean(-1)
    return nll + cfg.kl_factor * kl + decay_term(delta_norm, v_init_norm, cfg)


def rows_correct(logits: torch.Tensor, inputs: EditInputs) -> torch.Tensor:
    """Per rewrite row, whether every target token is the teacher-forced argmax: [..., n_rewrite]
    bools — the graphs' ``correct == target_len`` (per-row counts), from full logits."""
    n = inputs.n_rewrite
    labels = inputs.batch.labels[:n].to(logits.device)
    hit = (logits[..., :n, :, :].argmax(-1) == labels) | (labels == -100)
    return hit.all(-1)


def full_rows(correct: torch.Tensor, target_len: int) -> torch.Tensor:
    """Which rewrite rows show the whole target, from the graphs' per-row target counts
    ``correct`` [..., n_rewrite]: ``correct == target_len`` (bools; the counts are exact)."""
    return correct == target_len


def edit_holds(full_rows: torch.Tensor, fraction: float) -> bool:
    """The success criterion shared by every method: the plain rewrite prompt (row 0) shows the
    target and so does at least ``fraction`` of all rewrite rows (row 0 plus the context-templated
    ones). ``full_rows``: [n_rewrite] bools, True where the whole target is the argmax."""
    full = full_rows.reshape(-1).bool()
    return bool(full[0]) and int(full.sum()) >= fraction * full.numel() - 1e-9  # exact count, no float32 mean


def within_margin(loss: float, delta_norm: float, v_init_norm: float, cfg: ObjectiveConfig, margin: float) -> bool:
    """The success check's margin: the objective minus its decay term (mean target NLL per token
    plus the KL term, an upper bound on the NLL) is at most ``margin``."""
    return loss - decay_term(delta_norm, v_init_norm, cfg) <= margin
