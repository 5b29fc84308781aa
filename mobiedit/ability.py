"""General ability kept by an edit: fluency (ROME's n-gram entropy) and held-out perplexity.

* **Fluency** — ROME's ``n_gram_entropy`` (``experiments/py/eval_utils_counterfact.py``): for each
  generated text, the entropies (bits) of its word 2-gram and 3-gram frequency distributions,
  weighted 2/3 and 4/3, arithmetic mean of the two; then the mean over texts. ROME splits words
  with ``nltk.word_tokenize`` (whose sentence splitter needs a data download); here
  :func:`word_tokens` splits words and punctuation marks with a regular expression (same for plain
  prose; contractions such as ``don't`` stay one word). The texts are greedy generations of
  ``gen_tokens`` new tokens from the rewrite prompt, prompt included and normalised as ROME's
  ``generate_fast`` does (NFKD, blank lines to spaces).
* **Perplexity** — ``exp`` of the mean next-token NLL over fixed windows of held-out natural text
  (:func:`mobiedit.corpora.heldout_texts`, the Lee corpus; ``ppl_tokens`` tokens by default 2,048).
  An edit of layer ``l`` leaves everything below it unchanged, so :class:`PerplexityProbe` keeps the
  residual stream entering layer ``l`` once and, after an edit, reruns only layers ``>= l``, the
  final norm and the LM head (equal to the full forward to float rounding; tested).

Contract: nothing here changes the model; all passes run under ``torch.no_grad``.
"""
from __future__ import annotations

import math
import re
import unicodedata
from collections import Counter
from dataclasses import dataclass

import torch

from .errors import ConfigError
from .families import Family, check_edit_layer, get_module, n_layers, rotary_tables
from .hooks import record

_WORD = re.compile(r"\w+(?:[-'’]\w+)*|[^\w\s]")


def word_tokens(text: str) -> list[str]:
    """Words (with inner hyphens/apostrophes) and single punctuation marks of ``text``."""
    return _WORD.findall(text)


def compute_n_gram_entropy(text: str, ns: tuple[int, ...] = (2, 3),
                           weights: tuple[float, ...] = (2 / 3, 4 / 3)) -> float:
    """ROME's ``compute_n_gram_entropy`` (arithmetic aggregation): mean over ``n`` of
    ``weight_n * H_n`` with ``H_n`` the entropy in bits of the text's word n-gram frequencies.
    A text with no n-gram of some order contributes 0 for that order."""
    toks = word_tokens(text)
    parts = []
    for n, w in zip(ns, weights):
        counts = Counter(tuple(toks[i:i + n]) for i in range(len(toks) - n + 1))
        total = sum(counts.values())
        h = -sum(c / total * math.log2(c / total) for c in counts.values()) if total else 0.0
        parts.append(w * h)
    return sum(parts) / len(parts)


def n_gram_entropy(texts: list[str]) -> float:
    """ROME's ``n_gram_entropy``: the arithmetic mean of :func:`compute_n_gram_entropy` over texts."""
    if not texts:
        return float("nan")
    return sum(compute_n_gram_entropy(t) for t in texts) / len(texts)


def generate_greedy(model, tok, prompt: str, max_new_tokens: int = 30) -> str:
    """``prompt`` plus its greedy continuation of up to ``max_new_tokens`` tokens (KV cache; stops
    at EOS), decoded without special tokens and normalised as ROME's ``generate_fast``."""
    dev = next(model.parameters()).device
    ids = torch.tensor([tok(prompt)["input_ids"]], device=dev)
    out, past = ids[0].tolist(), None
    eos = tok.eos_token_id
    with torch.no_grad():
        step = ids
        for _ in range(max_new_tokens):
            res = model(input_ids=step, past_key_values=past, use_cache=True)
            past = res.past_key_values
            nxt = int(res.logits[0, -1].argmax())
            if nxt == eos:
                break
            out.append(nxt)
            step = torch.tensor([[nxt]], device=dev)
    text = tok.decode(out, skip_special_tokens=True)
    return unicodedata.normalize("NFKD", text).replace("\n\n", " ")


def heldout_windows(tok, texts: list[str], n_tokens: int = 2048, window: int = 256) -> torch.Tensor:
    """The first ``n_tokens`` tokens of ``texts`` (joined by newlines, no special tokens) as
    ``[n_tokens // window, window]`` windows; a BOS is put before each window when the tokenizer
    adds one to a text (it is input only, never predicted)."""
    if window < 2 or n_tokens < window:
        raise ConfigError(f"n_tokens {n_tokens}, window {window}", where="perplexity sample",
                          fix="use window >= 2 and n_tokens >= window (e.g. 2048 and 256)")
    ids: list[int] = []
    for t in texts:
        ids += tok(t + "\n", add_special_tokens=False)["input_ids"]
        if len(ids) >= n_tokens:
            break
    n = min(len(ids), n_tokens) // window
    if n == 0:
        raise ConfigError(f"held-out text has only {len(ids)} tokens", where="perplexity sample",
                          fix=f"use a window of at most {len(ids)} tokens")
    w = torch.tensor(ids[: n * window]).view(n, window)
    probe = tok("a")["input_ids"]
    bos = tok.bos_token_id
    if bos is not None and probe and probe[0] == bos:
        w = torch.cat([torch.full((n, 1), bos), w], 1)
    return w


def _nll_sum(head: torch.nn.Module, h: torch.Tensor, labels: torch.Tensor, rows: int = 64) -> float:
    """Sum over positions of ``-log softmax(head(h))[label]`` for ``h`` [T, d], ``labels`` [T]
    (vocabulary logits ``rows`` positions at a time)."""
    total = 0.0
    for i in range(0, h.shape[0], rows):
        z = head(h[i:i + rows]).float()
        total += float((torch.logsumexp(z, -1) - z.gather(-1, labels[i:i + rows, None]).squeeze(-1)).sum())
    return total


def perplexity_full(model, windows: torch.Tensor) -> float:
    """Perplexity of ``windows`` [N, T] from the model's own logits, one full forward per window
    (the reference path)."""
    dev = next(model.parameters()).device
    total, count = 0.0, 0
    with torch.no_grad():
        for row in windows:
            x = row.view(1, -1).to(dev)
            logits = model(input_ids=x, attention_mask=torch.ones_like(x)).logits[0, :-1].float()
            total += float((torch.logsumexp(logits, -1) - logits.gather(-1, x[0, 1:, None]).squeeze(-1)).sum())
            count += x.shape[1] - 1
    return math.exp(total / count)


class PerplexityProbe:
    """Held-out perplexity of a model whose edits touch only layers ``>= layer``.

    Built once per (model, layer, windows): keeps the residual stream entering ``layer`` and the
    pre-edit perplexity. :meth:`perplexity` then reruns only layers ``>= layer`` on the current
    weights. Valid while no weight below ``layer`` (nor the embedding) changes.
    """

    def __init__(self, model, family: Family, layer: int, windows: torch.Tensor) -> None:
        check_edit_layer(model, family, (layer,), warn_last=False)
        L = n_layers(model, family)
        self.family, self.layer, self.windows = family, layer, windows
        dev = next(model.parameters()).device
        self.blocks = [get_module(model, family.layer, i) for i in range(layer, L)]
        self.types = [None] * L if family.layer_types_attr is None else list(getattr(model.config, family.layer_types_attr))
        sliding = getattr(model.config, "sliding_window", None)
        if sliding and windows.shape[1] > sliding and family.layer_types_attr is not None:
            raise ConfigError(f"window {windows.shape[1]} exceeds the sliding window {sliding}",
                              where="perplexity probe", fix=f"use windows of at most {sliding} tokens")
        x = windows.to(dev)
        with torch.no_grad(), record(self.blocks[0], outputs=False, stop=True) as rec:
            model(input_ids=x, attention_mask=torch.ones_like(x))
        self.h_in = rec.input.detach().clone()  # [N, T, d]
        N, T, _ = self.h_in.shape
        pos = torch.arange(T, device=dev).view(1, T).expand(N, T)
        with torch.no_grad():
            self.pe = rotary_tables(model, family, self.h_in, pos)
        causal = torch.ones(T, T, dtype=torch.bool, device=dev).tril()
        self.mask = torch.zeros(1, 1, T, T, dtype=self.h_in.dtype, device=dev).masked_fill(
            ~causal, torch.finfo(self.h_in.dtype).min)
        self.norm = get_module(model, family.final_norm)
        self.head = get_module(model, family.lm_head)
        self.pre = self.perplexity()

    def perplexity(self) -> float:
        """Perplexity with the current weights of layers ``>= layer`` (the fast path)."""
        total, count = 0.0, 0
        with torch.no_grad():
            for r in range(self.h_in.shape[0]):
                x = self.h_in[r:r + 1]
                for i, blk in enumerate(self.blocks):
                    kind = self.types[self.layer + i]
                    kw = {"position_embeddings": tuple(t[r:r + 1] for t in self.pe[kind])} if self.pe else {}
                    x = blk(x, attention_mask=self.mask, **kw)
                    x = x[0] if isinstance(x, tuple) else x
                h = self.norm(x[0])
                labels = self.windows[r, 1:].to(h.device)
                total += _nll_sum(self.head, h[:-1], labels)
                count += labels.numel()
        return math.exp(total / count)


@dataclass(frozen=True)
class AbilityConfig:
    """Cost knobs of the general-ability scores (defaults keep one request to a few seconds)."""

    gen_tokens: int = 30
    ppl_tokens: int = 2048
    ppl_window: int = 256


class AbilityProbe:
    """Fluency and held-out perplexity of one model around one edit layer (see module docstring)."""

    def __init__(self, model, tok, family: Family, layer: int, cfg: AbilityConfig = AbilityConfig(),
                 texts: list[str] | None = None) -> None:
        from .corpora import heldout_texts

        self.cfg = cfg
        windows = heldout_windows(tok, texts if texts is not None else heldout_texts(), cfg.ppl_tokens, cfg.ppl_window)
        self.ppl = PerplexityProbe(model, family, layer, windows)

    @property
    def perplexity_pre(self) -> float:
        return self.ppl.pre

    def perplexity(self) -> float:
        """Perplexity with the model's current (edited) weights."""
        return self.ppl.perplexity()

    def fluency(self, model, tok, prompt: str) -> float:
        """n-gram entropy of the greedy generation from ``prompt``."""
        return compute_n_gram_entropy(generate_greedy(model, tok, prompt, self.cfg.gen_tokens))
