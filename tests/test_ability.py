"""Field-standard metrics: ROME's probability convention, locality against the unedited model,
ROME's n-gram entropy (fluency), and held-out perplexity (fast path = full forward)."""
from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch

from mobiedit.ability import (AbilityConfig, AbilityProbe, PerplexityProbe, compute_n_gram_entropy,
                              generate_greedy, heldout_windows, n_gram_entropy, perplexity_full, word_tokens)
from mobiedit.evaluate import aggregate, format_table, pre_edit_snapshot, score_request, teacher_forced
from mobiedit.families import get_module
from mobiedit.models import load_model
from mobiedit.requests import EditRequest, bundled_path, load_requests

VOCAB = ["<pad>", "the", "capital", "is", "Paris", "Rome", "New", "York"]


class WordTok:
    """A whitespace word tokenizer over VOCAB (no special tokens)."""

    pad_token_id, eos_token_id, bos_token_id = 0, None, None

    def __call__(self, text, add_special_tokens=True, **_):
        return {"input_ids": [VOCAB.index(w) for w in text.split()]}


class Bigram(torch.nn.Module):
    """logits[b, t] = table[input_ids[b, t]]: the next-token distribution depends on the last token only."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = torch.nn.Parameter(table, requires_grad=False)

    def forward(self, input_ids, attention_mask=None, **_):
        return SimpleNamespace(logits=self.table[input_ids])


def _bigram(p_york_after_new: float) -> Bigram:
    """After "is": P(Paris) = 1/3, P(New) = 1/6; after "New": P(York) = the argument."""
    V = len(VOCAB)
    t = torch.zeros(V, V, dtype=torch.float64)
    t[VOCAB.index("is"), VOCAB.index("Paris")] = math.log(4.0)  # exp sum: 6·1 + 4 + 2 = 12
    t[VOCAB.index("is"), VOCAB.index("New")] = math.log(2.0)
    # after "New": York gets e^x with e^x / (e^x + 7) = p
    t[VOCAB.index("New"), VOCAB.index("York")] = math.log(7 * p_york_after_new / (1 - p_york_after_new))
    return Bigram(t)


REQ = EditRequest(case_id="hand", prompt="{} is", subject="the capital", target_new="New York",
                  target_true="Paris", paraphrase_prompts=("capital is",))


def test_probability_convention_hand_case():
    tok = WordTok()
    # P(York | New) = 1/2: mean NLL of "New York" = (ln 6 + ln 2)/2 = 1.2425 > ln 3 = 1.0986 -> fails
    m = _bigram(0.5)
    new = teacher_forced(m, tok, [REQ.rewrite_prompt], ["New York"])
    true = teacher_forced(m, tok, [REQ.rewrite_prompt], ["Paris"])
    assert new.nll[0] == pytest.approx((math.log(6) + math.log(2)) / 2, abs=1e-6)
    assert true.nll[0] == pytest.approx(math.log(3), abs=1e-6)
    s = score_request(m, tok, REQ, None)
    assert s.efficacy_prob == 0.0 and s.generalization_prob == 0.0
    assert s.efficacy_acc == 0.5  # "New" is not the argmax after "is" (Paris is), "York" is after "New"
    # P(York | New) = 61/68: mean NLL (ln 6 + ln 68/61)/2 = 0.950 < ln 3 — success by ROME's mean-token
    # rule although the whole-answer probability 1/6 · 61/68 = 0.15 is below P(Paris) = 1/3
    m = _bigram(61 / 68)
    s = score_request(m, tok, REQ, None)
    assert s.efficacy_prob == 1.0 and s.generalization_prob == 1.0


def test_n_gram_entropy_hand_value():
    # "a b a b": bigrams ab, ba, ab -> H2 = h(1/3) = 0.918296 bits; trigrams aba, bab -> H3 = 1 bit
    h2 = -(2 / 3 * math.log2(2 / 3) + 1 / 3 * math.log2(1 / 3))
    expected = (2 / 3 * h2 + 4 / 3 * 1.0) / 2
    assert compute_n_gram_entropy("a b a b") == pytest.approx(expected, abs=1e-12)
    assert expected == pytest.approx(0.972765, abs=1e-6)
    assert n_gram_entropy(["a b a b", "x y z"]) == pytest.approx((expected + (2 / 3 * 1 + 4 / 3 * 0) / 2) / 2)
    # a repeated phrase has lower entropy than varied text of the same length
    assert compute_n_gram_entropy("the cat " * 10) < compute_n_gram_entropy(" ".join(f"w{i}" for i in range(20)))


def test_word_tokens_split_punctuation():
    assert word_tokens("Paris, France's capital-city!") == ["Paris", ",", "France's", "capital-city", "!"]


def _requests(n: int) -> list[EditRequest]:
    return load_requests(bundled_path("counterfact-edit-1k.json"))[:n]


def test_locality_unchanged_vs_unedited(small_fact_lm):
    lm = load_model(small_fact_lm)
    reqs = _requests(8)
    pres = [pre_edit_snapshot(lm.model, lm.tokenizer, r) for r in reqs]
    same = aggregate([score_request(lm.model, lm.tokenizer, r, p) for r, p in zip(reqs, pres)])
    assert same["locality_unchanged"] == 100.0
    assert same["locality_acc"] == 100.0 and 0.0 <= same["locality_truth"] <= 100.0
    # a destructive change of one layer's MLP output (large seeded noise) changes neighbour predictions
    w = get_module(lm.model, lm.family.mlp_out, 1).weight
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        w.add_(torch.randn(w.shape, generator=g) * 50 * w.std())
    broken = aggregate([score_request(lm.model, lm.tokenizer, r, p) for r, p in zip(reqs, pres)])
    assert broken["locality_unchanged"] < 100.0
    no_ref = score_request(lm.model, lm.tokenizer, reqs[0], None)
    assert math.isnan(no_ref.locality_unchanged) and no_ref.locality_acc == no_ref.locality_truth


def _perturb(lm, layer: int, scale: float = 0.5) -> None:
    w = get_module(lm.model, lm.family.mlp_out, layer).weight
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        w.add_(torch.randn(w.shape, generator=g) * scale * w.std())


def test_perplexity_fast_path_equals_full_forward(tiny_model_dir):
    lm = load_model(tiny_model_dir)
    texts = [f"{r.rewrite_prompt} {r.target_true}." for r in _requests(200)]
    windows = heldout_windows(lm.tokenizer, texts, n_tokens=256, window=64)
    assert windows.shape[0] == 4
    probe = PerplexityProbe(lm.model, lm.family, 1, windows)
    full = perplexity_full(lm.model, windows)
    assert math.log(probe.pre) == pytest.approx(math.log(full), abs=1e-5)
    _perturb(lm, 1, scale=20.0)  # an edit of the probed layer: the fast path must see it
    after = perplexity_full(lm.model, windows)
    assert abs(math.log(after) - math.log(full)) > 1e-3
    assert math.log(probe.perplexity()) == pytest.approx(math.log(after), abs=1e-5)


def test_ability_probe_on_heldout_text(small_fact_lm):
    lm = load_model(small_fact_lm)
    probe = AbilityProbe(lm.model, lm.tokenizer, lm.family, 2, AbilityConfig(gen_tokens=12, ppl_tokens=512, ppl_window=128))
    assert probe.ppl.windows.shape[0] == 4 and probe.perplexity() == probe.perplexity_pre
    text = generate_greedy(lm.model, lm.tokenizer, _requests(1)[0].rewrite_prompt, 12)
    assert text.startswith(_requests(1)[0].rewrite_prompt.split()[0])
    req = _requests(1)[0]
    pre = pre_edit_snapshot(lm.model, lm.tokenizer, req, probe)
    s = score_request(lm.model, lm.tokenizer, req, pre, probe)
    assert s.fluency == s.fluency_pre and s.fluency > 0 and s.perplexity == s.perplexity_pre
    _perturb(lm, 2)
    s2 = score_request(lm.model, lm.tokenizer, req, pre, probe)
    assert s2.perplexity != s2.perplexity_pre
    agg = aggregate([s, s2])
    assert agg["perplexity_change_pct"] == pytest.approx(50 * (s2.perplexity / s2.perplexity_pre - 1))
    table = format_table(agg)
    assert "locality (unchanged)" in table and "perplexity change %" in table and "fluency after" in table


def test_perplexity_fast_path_on_gemma3(tmp_path):
    """Gemma-3's quirks (scaled embeddings, per-layer-type RoPE, pre/post feed-forward norms):
    the probe's rerun of layers >= l equals the model's own forward, before and after a change."""
    from tests.conftest import _save_tiny_gemma

    _save_tiny_gemma(tmp_path)
    lm = load_model(tmp_path)
    with torch.no_grad():  # random tied embeddings give near-uniform logits that hide any change
        get_module(lm.model, lm.family.embed).weight.mul_(30)
    texts = [f"{r.rewrite_prompt} {r.target_true}." for r in _requests(200)]
    windows = heldout_windows(lm.tokenizer, texts, n_tokens=256, window=64)
    probe = PerplexityProbe(lm.model, lm.family, 1, windows)
    assert math.log(probe.pre) == pytest.approx(math.log(perplexity_full(lm.model, windows)), abs=1e-5)
    _perturb(lm, 2, scale=20.0)
    after = perplexity_full(lm.model, windows)
    assert abs(math.log(after) - math.log(probe.pre)) > 1e-3
    assert math.log(probe.perplexity()) == pytest.approx(math.log(after), abs=1e-5)
