"""``mobiedit pretrain``: data → tokenizer → model → training → measured knowledge → HF folder."""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import torch

from ..corpora import counterfact_records
from ..evaluate import greedy_exact
from ..profile import FACTLM_META, ModelProfile
from .train import FactLMConfig, build_facts, corpus_sentences, make_model, save_folder, train_model, train_tokenizer

log = logging.getLogger(__name__)

CORPUS_FILE = "factlm_corpus.txt"
META_FILE = FACTLM_META


def knowledge_report(model, tok, records: list[dict]) -> dict:
    """Pre-edit greedy accuracy on the ground truth: whole target and first token, for the
    prompt, rephrase and locality prompt of each record (fractions in [0, 1])."""
    rep = {}
    for kind, pk, tk in (("prompt", "prompt", "ground_truth"), ("rephrase", "rephrase_prompt", "ground_truth"),
                         ("locality", "locality_prompt", "locality_ground_truth")):
        whole, first = greedy_exact(model, tok, [r[pk] for r in records], [r[tk] for r in records])
        rep[kind] = {"whole": sum(whole) / len(whole), "first_token": sum(first) / len(first)}
    return rep


def pretrain(cfg: FactLMConfig, out: Path, progress: bool = True, edit_layer: int = 0) -> dict:
    """Train the fact LM of ``cfg`` and write it to ``out`` (atomically). Returns the report."""
    t0 = time.perf_counter()
    records, train_records = counterfact_records()
    facts = build_facts(cfg, records, train_records)
    sentences = corpus_sentences(cfg, facts)
    log.info("fact LM corpus: %d facts, %d sentences", len(facts), len(sentences))
    tok = train_tokenizer(sentences, cfg.vocab_size, [f.subject for f in facts if f.subject] if cfg.entity_tokens else None)
    model = make_model(cfg, tok, torch.Generator().manual_seed(cfg.seed))
    losses = train_model(cfg, model, tok, sentences, progress=progress)
    report = knowledge_report(model, tok, records[: cfg.n_facts])
    meta = {"config": asdict(cfg), "report": report, "edit_layer": edit_layer,
            "edit_layer_reason": "ROME layer sweep of the fact LM (docs/fact_lm.md)", "epoch_losses": losses, "n_facts_in_corpus": len(facts),
            "n_sentences": len(sentences), "train_seconds": time.perf_counter() - t0,
            "params": sum(p.numel() for p in model.parameters())}
    save_folder(out, model, tok, meta, extra={CORPUS_FILE: "\n".join(sentences)},
                profile=fact_lm_profile(edit_layer))
    log.info("fact LM trained in %.0fs: %s", meta["train_seconds"], json.dumps(report))
    return meta


def fact_lm_profile(edit_layer: int) -> ModelProfile:
    """The fact LM's model profile: its layer (chosen by trace + ROME sweep, docs/fact_lm.md) and
    its own pretraining corpus as the key-statistics text."""
    return ModelProfile(edit_layer=edit_layer, layer_reason="causal trace + ROME layer sweep of the fact LM (docs/fact_lm.md)",
                        stats_corpus=f"file:{CORPUS_FILE}", chat_template=False)


def corpus_of(model_dir: Path) -> list[str] | None:
    """The pretraining corpus saved beside a fact LM, or None for other models."""
    p = Path(model_dir) / CORPUS_FILE
    return p.read_text().split("\n") if p.is_file() else None
