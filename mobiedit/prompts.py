"""Tokenising prompts with targets and locating the subject's last token.

Conventions (ROME's): a target is appended as ``" " + target``, tokenised separately from the
prompt (no special tokens), and scored teacher-forced: the logits at positions
``len(prompt)-1 ... len(prompt)+len(target)-2`` predict the target tokens.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .errors import RequestError


def target_ids(tok, target: str) -> list[int]:
    """Token ids of ``" " + target`` without special tokens."""
    ids = tok(" " + target.strip(), add_special_tokens=False)["input_ids"]
    if not ids:
        raise RequestError("target tokenises to nothing", where=f"target {target!r}",
                           fix="use a non-empty target string")
    return ids


def prompt_ids(tok, text: str) -> list[int]:
    """Token ids of a prompt with the tokenizer's special tokens (e.g. BOS)."""
    return tok(text)["input_ids"]


def subject_last_index(tok, text: str, subject: str) -> int:
    """Index, in ``prompt_ids(tok, text)``, of the last token of the first occurrence of ``subject``.

    Computed as ROME does: the length of the tokenised prefix that ends with the subject, minus 1.
    """
    i = text.find(subject)
    if i < 0:
        raise RequestError(f"subject {subject!r} does not occur in prompt {text!r}",
                           where="field 'subject'", fix="make the prompt contain the subject verbatim")
    return len(prompt_ids(tok, text[: i + len(subject)].rstrip())) - 1


def subject_context_error(tok, prompt: str, subject: str, where: str) -> RequestError | None:
    """The refusal of an edit whose subject ends at the first token of ``prompt`` (None: it does not).

    An edit is keyed at the edited layer's input at the subject's last token. A tokenizer that adds
    no BOS (SmolLM2's) puts a subject that opens the prompt at position 0, and the state there has no
    context (in causal LMs it is known as the attention sink). On SmolLM2 no edit keyed there made
    the prompt say the new answer (both such bench requests, both methods), and the update was
    12–24x the in-context edit probed beside it and reached every text (docs/results.md, "a subject
    at position 0"). With a BOS no subject is ever there. The app's ``EditBatchBuilder`` transcribes this rule."""
    if subject_last_index(tok, prompt, subject) != 0:
        return None
    return RequestError(f"the subject {subject!r} is the first token of the prompt {prompt!r} and the tokenizer "
                        "adds no BOS: an edit keyed at position 0 (the model's attention sink) does not hold "
                        "and disturbs every text", where=where,
                        fix="reword the prompt so that words come before the subject (e.g. \"The capital city of "
                            "X is\" rather than \"X's capital city is\")")


def request_refusal(tok, req) -> RequestError | None:
    """:func:`subject_context_error` of an edit request ``req`` (its rewrite prompt and subject)."""
    return subject_context_error(tok, req.rewrite_prompt, req.subject, f"request {req.case_id!r}, field 'prompt'")


@dataclass
class TargetBatch:
    """Right-padded prompts + targets, teacher-forced.

    ``input_ids`` [B, T]; ``attention_mask`` [B, T]; ``subject_idx`` [B] (or -1 when not asked);
    ``labels`` [B, T] with the target token at the position that *predicts* it and -100 elsewhere.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    subject_idx: torch.Tensor
    labels: torch.Tensor
    last_idx: torch.Tensor  # index of the last real token of each row

    def to(self, device: torch.device) -> "TargetBatch":
        return TargetBatch(*(t.to(device) for t in (self.input_ids, self.attention_mask,
                                                    self.subject_idx, self.labels, self.last_idx)))


def make_batch(tok, prompts: list[str], targets: list[str] | None, subject: str | None = None,
               drop_last_target_token: bool = True) -> TargetBatch:
    """Build a :class:`TargetBatch`.

    With ``targets``, each row is ``prompt + target`` minus the target's last token when
    ``drop_last_target_token`` (nothing is predicted after it), so the row length is exactly what
    scoring needs. ``subject`` (if given) is located in every prompt.
    """
    rows, labels, subj, last = [], [], [], []
    for k, p in enumerate(prompts):
        pid = prompt_ids(tok, p)
        tid = target_ids(tok, targets[k]) if targets is not None else []
        ids = pid + (tid[:-1] if (tid and drop_last_target_token) else tid)
        lab = [-100] * len(ids)
        for j, t in enumerate(tid):
            if len(pid) - 1 + j < len(ids) or not drop_last_target_token:
                pos = len(pid) - 1 + j
                if pos < len(lab):
                    lab[pos] = t
        rows.append(ids)
        labels.append(lab)
        subj.append(subject_last_index(tok, p, subject) if subject is not None else -1)
        last.append(len(ids) - 1)
    T = max(len(r) for r in rows)
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    x = torch.full((len(rows), T), pad, dtype=torch.long)
    m = torch.zeros((len(rows), T), dtype=torch.long)
    y = torch.full((len(rows), T), -100, dtype=torch.long)
    for r, (ids, lab) in enumerate(zip(rows, labels)):
        x[r, : len(ids)] = torch.tensor(ids)
        m[r, : len(ids)] = 1
        y[r, : len(lab)] = torch.tensor(lab)
    return TargetBatch(x, m, torch.tensor(subj), y, torch.tensor(last))


def target_logprobs(logits: torch.Tensor, batch: TargetBatch) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-row sum of target log-probs and number of target tokens.

    Returns (sum_logp [B], n_tokens [B]).
    """
    logp = torch.log_softmax(logits.float(), dim=-1)
    mask = batch.labels != -100
    safe = batch.labels.clamp(min=0)
    tok_lp = logp.gather(-1, safe.unsqueeze(-1)).squeeze(-1) * mask
    return tok_lp.sum(-1), mask.sum(-1)


def position_limit(config) -> int | None:
    """The model's position limit: ``max_position_embeddings`` (``n_positions`` for GPT-2), or None."""
    for attr in ("max_position_embeddings", "n_positions"):
        value = getattr(config, attr, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def template_reserve(tok, templates: list[str]) -> int:
    """Tokens the longest context template adds in front of a prompt (0 for ``["{}"]``)."""
    return max((len(prompt_ids(tok, t.replace("{}", "").strip())) for t in templates if t != "{}"), default=0)


def _max_token_chars(tok) -> int:
    try:
        vocab = tok.get_vocab()
    except Exception:  # noqa: BLE001 - a tokenizer without a vocabulary listing: no character bound
        return 0
    return max((len(t) for t in vocab), default=0)


def check_request_lengths(tok, requests: list, limit: int | None, reserve: int = 0) -> None:
    """Refuse, before any forward pass, a request whose longest row needs more than ``limit``
    positions: each prompt (rewrite, paraphrases, neighbours) plus its longest answer, plus
    ``reserve`` tokens of context template. ``limit`` None (no position limit) checks nothing.

    A prompt longer in characters than ``limit`` times the tokenizer's longest token cannot fit
    and is refused without being tokenised (a 1 MB subject fails in milliseconds). Raises
    RequestError naming the request and field, worded like the bundle path's shape check.
    """
    if not limit:
        return
    char_bound = limit * _max_token_chars(tok)
    for req in requests:
        answers = [a for a in (req.target_new, req.target_true) if a]
        rows = [("prompt", req.rewrite_prompt, answers)]
        rows += [("paraphrase_prompts", p, [req.target_new]) for p in req.paraphrase_prompts]
        rows += [("neighborhood_prompts", p, [a]) for p, a in zip(req.neighborhood_prompts, req.neighborhood_answers)]
        for field, text, targets in rows:
            where = f"request {req.case_id!r}, field '{field}'"
            fix = ("shorten the prompt / subject / target to fit, or use a model with more positions "
                   "(max_position_embeddings)")
            longest = max([len(text)] + [len(text) + len(t) + 1 for t in targets])
            if char_bound and longest > char_bound:
                raise RequestError(f"this request is {longest} characters long; the model has {limit} positions",
                                   where=where, fix=fix)
            need = len(prompt_ids(tok, text)) + max((len(target_ids(tok, t)) for t in targets), default=0) + reserve
            if need > limit:
                raise RequestError(f"this request needs {need} positions (prompt + target"
                                   + (f" + {reserve} of context template" if reserve else "")
                                   + f"); the model has {limit} positions", where=where, fix=fix)
