"""Pretrain the fact LM: a small ``LlamaForCausalLM`` with a BPE tokenizer trained by ``tokenizers``.

Contract: :func:`pretrain` writes a complete Hugging Face folder (config.json, model.safetensors,
tokenizer.json, tokenizer_config.json, factlm.json with the config and the measured report)
atomically, so an interrupted run leaves nothing half-written. Everything random is drawn from a
``torch.Generator`` / ``random.Random`` seeded by the config.
"""
from __future__ import annotations

import json
import logging
import math
import random
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from tqdm import tqdm

from ..atomic import atomic_dir
from ..profile import FACTLM_META, ModelProfile, write_profile
from ..errors import ConfigError
from .corpus import Fact, facts_from_records, mine_templates, render

log = logging.getLogger(__name__)

BOS, EOS, PAD = "<s>", "</s>", "<pad>"


@dataclass(frozen=True)
class FactLMConfig:
    """What the fact LM is trained on and how big it is. Validated on construction."""

    n_facts: int = 1000            # records of the bundled 1k CounterFact set
    n_templates: int = 8           # mined phrasings per fact
    questions: bool = True         # also render each phrasing as "Q: ...? A: obj"
    card: bool = False             # also "subject: obj"
    entity_tokens: bool = False    # every subject is one whole-word token
    extra_facts: int = 1           # train facts per target_new object (teaches the edit targets)
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 1024
    num_layers: int = 4
    num_heads: int = 8
    epochs: int = 14
    pack: int = 1                  # sentences per training sequence (EOS-separated, like documents):
                                   # with 1, the answer position reads the subject's raw tokens at
                                   # layer 0 and a ROME edit at the subject cannot land (docs/fact_lm.md)
    batch_size: int = 32
    lr: float = 1e-3
    weight_decay: float = 0.01
    seed: int = 0

    def __post_init__(self) -> None:
        for name in ("n_facts", "n_templates", "pack", "vocab_size", "hidden_size", "intermediate_size",
                     "num_layers", "num_heads", "epochs", "batch_size"):
            if int(getattr(self, name)) <= 0:
                raise ConfigError(f"must be a positive integer, got {getattr(self, name)!r}",
                                  where=f"FactLMConfig.{name}", fix="use a value >= 1")
        if self.n_facts > 1000:
            raise ConfigError(f"only 1000 bundled facts, got {self.n_facts}", where="FactLMConfig.n_facts",
                              fix="use n_facts <= 1000")
        if self.hidden_size % self.num_heads:
            raise ConfigError("hidden_size must be divisible by num_heads", where="FactLMConfig.num_heads",
                              fix=f"pick a divisor of {self.hidden_size}")
        if not (0 < self.lr < 1):
            raise ConfigError(f"lr={self.lr} out of (0, 1)", where="FactLMConfig.lr", fix="e.g. 1e-3")


def build_facts(cfg: FactLMConfig, records: list[dict], train_records: list[dict]) -> list[Fact]:
    """Facts of the first ``n_facts`` records, their neighbours, and train facts for the targets."""
    rng = random.Random(cfg.seed)
    bank = mine_templates(records + train_records)
    chosen = records[: cfg.n_facts]
    facts = facts_from_records(chosen, bank, cfg.n_templates, rng)
    if cfg.extra_facts:
        seen = {f.subject for f in facts}
        by_obj: dict[str, list[dict]] = {}
        for r in train_records:
            by_obj.setdefault(r["ground_truth"], []).append(r)
        for r in chosen:
            picked = 0
            for tr in by_obj.get(r["target_new"], []):
                if picked >= cfg.extra_facts:
                    break
                if tr["subject"] in seen:
                    continue
                seen.add(tr["subject"])
                facts.extend(facts_from_records([tr], bank, cfg.n_templates, rng)[:1])
                picked += 1
    return facts


def corpus_sentences(cfg: FactLMConfig, facts: list[Fact]) -> list[str]:
    """All training sentences, deduplicated, in a fixed order."""
    out: dict[str, None] = {}
    for f in facts:
        for s in render(f, cfg.questions, cfg.card):
            out[s] = None
    return list(out)


def train_tokenizer(sentences: list[str], vocab_size: int, entities: list[str] | None = None):
    """A byte-level BPE tokenizer (``tokenizers``) wrapped as a transformers fast tokenizer.

    ``entities`` become whole-word added tokens (with and without the space before them), so a
    subject is a single token wherever it occurs and decodes back to the same text.
    """
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[PAD, BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(sentences, trainer)
    if entities:
        forms = {f for e in set(entities) for f in (e, " " + e)}
        tk.add_tokens([AddedToken(f, single_word=not f.startswith(" "), normalized=False)
                       for f in sorted(forms, key=lambda x: (-len(x), x))])
    bos_id = tk.token_to_id(BOS)
    tk.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                      special_tokens=[(BOS, bos_id)])
    return PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=BOS, eos_token=EOS, pad_token=PAD)


def make_model(cfg: FactLMConfig, tok, generator: torch.Generator):
    """A fresh ``LlamaForCausalLM`` of the configured size (weights drawn from ``generator``)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    mcfg = LlamaConfig(vocab_size=len(tok), hidden_size=cfg.hidden_size,
                       intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
                       num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_heads,
                       max_position_embeddings=256, bos_token_id=tok.bos_token_id,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                       tie_word_embeddings=False)
    model = LlamaForCausalLM(mcfg)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=generator) * 0.02)
    return model


def _batches(ids: list[list[int]], bs: int, pad: int, rng: random.Random):
    order = list(range(len(ids)))
    rng.shuffle(order)
    for i in range(0, len(order), bs):
        chunk = [ids[j] for j in order[i:i + bs]]
        T = max(len(c) for c in chunk)
        x = torch.full((len(chunk), T), pad, dtype=torch.long)
        m = torch.zeros((len(chunk), T), dtype=torch.long)
        for r, c in enumerate(chunk):
            x[r, :len(c)] = torch.tensor(c)
            m[r, :len(c)] = 1
        yield x, m


def _packed(ids: list[list[int]], pack: int, rng: random.Random) -> list[list[int]]:
    """Group sentences (each ``BOS … EOS``) into sequences of ``pack``, dropping the BOS of all
    but the first, so a sentence is seen after unrelated ones as in packed LM pretraining."""
    if pack == 1:
        return ids
    order = list(range(len(ids)))
    rng.shuffle(order)
    return [ids[order[i]] + [t for j in order[i + 1:i + pack] for t in ids[j][1:]] for i in range(0, len(order), pack)]


def train_model(cfg: FactLMConfig, model, tok, sentences: list[str], progress: bool = True) -> list[float]:
    """AdamW with linear warm-up and cosine decay on next-token loss over all sentences."""
    ids = [tok(s)["input_ids"] + [tok.eos_token_id] for s in sentences]
    seq_batch = max(1, cfg.batch_size // cfg.pack)  # packed sequences per step: ~batch_size sentences
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    steps_per_epoch = math.ceil(math.ceil(len(ids) / cfg.pack) / seq_batch)
    total = steps_per_epoch * cfg.epochs
    warm = min(200, total // 10)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / max(1, warm)) * 0.5 * (1 + math.cos(math.pi * min(s, total) / total)))
    rng = random.Random(cfg.seed + 1)
    model.train()
    losses = []
    bar = tqdm(total=total, desc="pretrain fact LM", disable=not progress, unit="step")
    for epoch in range(cfg.epochs):
        ep = []
        for x, m in _batches(_packed(ids, cfg.pack, rng), seq_batch, tok.pad_token_id, rng):
            labels = x.masked_fill(m == 0, -100)
            loss = model(input_ids=x, attention_mask=m, labels=labels).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            ep.append(loss.item())
            bar.update(1)
            bar.set_postfix(epoch=epoch, loss=f"{loss.item():.3f}")
        losses.append(sum(ep) / len(ep))
    bar.close()
    model.eval()
    return losses


def save_folder(out: Path, model, tok, meta: dict, extra: dict[str, str] | None = None,
                profile: ModelProfile | None = None) -> None:
    """Write the HF folder (plus ``factlm.json``, the model profile and any ``extra`` text files)
    atomically."""
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
        (tmp / FACTLM_META).write_text(json.dumps(meta, indent=1))
        if profile is not None:
            write_profile(tmp, profile)
        for name, text in (extra or {}).items():
            (tmp / name).write_text(text)
    log.info("saved fact LM to %s", out)


def config_dict(cfg: FactLMConfig) -> dict:
    return asdict(cfg)
