"""The natural text behind a model's key statistics ``C = E[k kᵀ]`` (the model profile's
``stats_corpus``), with its provenance."""
from __future__ import annotations

import logging
from dataclasses import dataclass

from .models import LoadedModel

log = logging.getLogger(__name__)


#: tokens of natural text behind a real model's key statistics (the field asks >= 100k)
STATS_TOKENS = 131_072
#: longest statistics text, in tokens (longer texts are cut; editing.stats truncates there too)
STATS_MAX_LEN = 256


@dataclass(frozen=True)
class StatsCorpus:
    """The key-statistics text and where it came from (``source``: name, version, licence, file;
    recorded in the statistics cache's metadata)."""

    texts: list[str]
    source: dict


def stats_texts_for(lm: LoadedModel, budget: int = STATS_TOKENS) -> list[str]:
    """The texts of :func:`stats_corpus_for`."""
    return stats_corpus_for(lm, budget).texts


def stats_corpus_for(lm: LoadedModel, budget: int = STATS_TOKENS) -> StatsCorpus:
    """The text behind the key statistics ``C = E[k kᵀ]``, chosen by the model profile's
    ``stats_corpus`` (``mobiedit.json``):

    * ``file:NAME`` — the lines of that file in the model folder (the fact LM's pretraining corpus);
    * ``wikipedia`` — natural Wikipedia text (:mod:`mobiedit.corpora`), paragraphs packed into
      chunks of at most :data:`STATS_MAX_LEN` tokens, the first ``budget`` tokens;
    * ``counterfact`` — the bundled CounterFact prompts with their answers (a small fallback).

    Without a profile: ``wikipedia`` (the fact LM writes a profile naming its own corpus file).
    Every text is at most :data:`STATS_MAX_LEN` tokens (longer lines are cut, not truncated away).
    """
    from .corpora import chunk_texts, counterfact_records, source_info, wikipedia_texts
    from .errors import ConfigError
    from .profile import PROFILE_FILE, read_profile

    prof = read_profile(lm.path)
    src = prof.stats_corpus if prof is not None else "wikipedia"
    log.info("key statistics corpus of %s: %s", lm.path, src)
    if src == "wikipedia":
        info = source_info()
        texts = chunk_texts(lm.tokenizer, wikipedia_texts(), STATS_MAX_LEN, pack=True, budget=budget)
        return StatsCorpus(texts, {"name": "wikipedia", "package": info["package"], "version": info["version"],
                                   "file": info["wikipedia"], "licence": info["wikipedia_licence"],
                                   "budget_tokens": budget})
    if src == "counterfact":
        recs, train = counterfact_records()
        return StatsCorpus([f"{r['prompt']} {r['ground_truth']}" for r in recs + train[:3000]],
                           {"name": "counterfact", "package": "mobiedit (bundled)", "licence": "MIT (ROME's CounterFact)"})
    path = lm.path / src[len("file:"):]
    if not path.is_file():
        raise ConfigError(f"stats_corpus names {path.name}, which is not in the model folder",
                          where=f"{lm.path / PROFILE_FILE}, field 'stats_corpus'",
                          fix="copy the file beside the model, or set stats_corpus to 'wikipedia'")
    return StatsCorpus(_cut_long(lm.tokenizer, path.read_text(encoding="utf-8").split("\n")),
                       {"name": src, "file": path.name})


def _cut_long(tok, lines: list[str]) -> list[str]:
    """``lines`` unchanged, except that a line over :data:`STATS_MAX_LEN` tokens becomes its pieces."""
    from .corpora import chunk_texts

    if not lines:
        return lines
    lengths = [len(ids) for ids in tok(lines, add_special_tokens=False)["input_ids"]]
    out: list[str] = []
    for line, n in zip(lines, lengths):
        out += chunk_texts(tok, [line], STATS_MAX_LEN, pack=False) if n > STATS_MAX_LEN - 2 else [line]
    return out
