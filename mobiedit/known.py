"""``mobiedit requests known``: keep the edit requests whose true answer the model already produces.

Editing research edits facts the model *knows* (ROME traces and edits such facts); a request whose
``target_true`` the unedited model does not produce measures nothing about forgetting or locality.

The test is greedy decoding of the rewrite prompt, read at two strengths per record:

* ``first_token`` — the first greedy token is the answer's first token;
* ``whole`` — the greedy continuation is the answer's whole token sequence.

Exactness: greedy decoding reproduces the target tokens ``t_1..t_n`` iff at every step ``j`` the
argmax given ``prompt + t_1..t_{j-1}`` is ``t_j`` — which is exactly the teacher-forced argmax of
``prompt + target`` at the target positions. So one batched teacher-forced forward per batch decides
both flags (no token-by-token decoding); :func:`mobiedit.evaluate.greedy_exact` is the slow
reference it equals (tested). Tokenisation follows :mod:`mobiedit.prompts` (``" " + answer``).

Output: the kept records in the flat request form (``prompt``, ``subject``, ``target_new``,
``ground_truth``, ``rephrase_prompt``, ``locality_prompt``, ``locality_ground_truth``) that
:func:`mobiedit.requests.load_requests` reads back, plus ``known`` (both flags and the rule
applied) and ``origin`` (source file, format, original case id). ``case_id`` is
``<file stem>/<original case id>``, unique across the source files.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import torch
from tqdm import tqdm

from .atomic import atomic_write_text
from .errors import ConfigError
from .prompts import make_batch, request_refusal
from .requests import EditRequest, load_requests

log = logging.getLogger(__name__)

RULES = ("whole", "first-token")


@dataclass(frozen=True)
class KnownFlags:
    """What the unedited model does with one record's rewrite prompt."""

    first_token: bool
    whole: bool

    def passes(self, rule: str) -> bool:
        """True when the record is kept under ``rule`` (``whole`` or ``first-token``)."""
        return self.whole if rule == "whole" else self.first_token


def known_flags(model, tok, prompts: Sequence[str], answers: Sequence[str], batch_size: int = 32,
                progress: bool = False) -> list[KnownFlags]:
    """Greedy first-token / whole-answer match of each ``answers[i]`` after ``prompts[i]``.

    Rows are batched by length (right padding) and the LM head is applied only at target positions
    (``logits_to_keep``). Order of the result = order of the input. Never changes the model.
    """
    if len(prompts) != len(answers):
        raise ValueError("prompts and answers differ in length")
    dev = next(model.parameters()).device
    lengths = [len(tok(p)["input_ids"]) + len(tok(" " + a)["input_ids"]) for p, a in zip(prompts, answers)]
    order = sorted(range(len(prompts)), key=lambda i: lengths[i])
    out: list[KnownFlags | None] = [None] * len(prompts)
    with tqdm(total=len(prompts), desc="known", unit="rec", disable=not progress) as bar:
        for s in range(0, len(order), batch_size):
            idx = order[s:s + batch_size]
            for i, flags in zip(idx, _batch_flags(model, tok, [prompts[i] for i in idx],
                                                  [answers[i] for i in idx], dev)):
                out[i] = flags
            bar.update(len(idx))
    return out  # type: ignore[return-value]


def _batch_flags(model, tok, prompts: list[str], answers: list[str], dev: torch.device) -> list[KnownFlags]:
    """One teacher-forced forward of a batch: the flags of each row."""
    b = make_batch(tok, prompts, answers)
    mask = b.labels != -100
    keep = mask.any(0).nonzero().flatten()  # positions that predict some row's target
    with torch.no_grad():
        logits = model(input_ids=b.input_ids.to(dev), attention_mask=b.attention_mask.to(dev),
                       logits_to_keep=keep.to(dev)).logits
    argmax = logits.argmax(-1).cpu()  # [B, len(keep)]
    flags = []
    for r in range(b.input_ids.shape[0]):
        cols = mask[r, keep].nonzero().flatten()
        hit = argmax[r, cols] == b.labels[r, keep[cols]]
        flags.append(KnownFlags(first_token=bool(hit[0]), whole=bool(hit.all())))
    return flags


@dataclass
class SourceCount:
    """Per source file: records read, records scorable (with a true answer), and kept per rule."""

    file: str
    read: int = 0
    scored: int = 0
    first_token: int = 0
    whole: int = 0
    #: known records left out because an edit of them is refused (:func:`mobiedit.prompts.subject_context_error`)
    refused: int = 0


@dataclass
class KnownScan:
    """The outcome of a scan: kept flat records, per-file counts, the rule, timing."""

    rule: str
    records: list[dict] = field(default_factory=list)
    counts: list[SourceCount] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def scored(self) -> int:
        return sum(c.scored for c in self.counts)

    def summary(self) -> str:
        """A small per-file table: read / scored / first-token / whole (kept by the rule marked *)."""
        mark = {"first-token": ("*", ""), "whole": ("", "*")}[self.rule]
        lines = [f"{'source':<32}{'read':>7}{'scored':>8}{'first-token' + mark[0]:>13}{'whole' + mark[1]:>8}"]
        for c in self.counts:
            lines.append(f"{c.file:<32}{c.read:>7}{c.scored:>8}{c.first_token:>13}{c.whole:>8}")
        tot = SourceCount("total", sum(c.read for c in self.counts), self.scored,
                          sum(c.first_token for c in self.counts), sum(c.whole for c in self.counts))
        lines.append(f"{tot.file:<32}{tot.read:>7}{tot.scored:>8}{tot.first_token:>13}{tot.whole:>8}")
        rate = self.scored / self.seconds if self.seconds > 0 else float("nan")
        refused = sum(c.refused for c in self.counts)
        left = f" ({refused} more left out: an edit refuses their prompt)" if refused else ""
        lines.append(f"kept {len(self.records)} by rule '{self.rule}'{left}; {rate:.1f} records/s")
        return "\n".join(lines)


def flat_record(req: EditRequest, stem: str, flags: KnownFlags, rule: str) -> dict:
    """The flat request form of ``req`` (what ``load_requests`` reads back) with its flags."""
    return {"case_id": f"{stem}/{req.case_id}", "prompt": req.rewrite_prompt, "subject": req.subject,
            "target_new": req.target_new, "ground_truth": req.target_true,
            "rephrase_prompt": list(req.paraphrase_prompts), "locality_prompt": list(req.neighborhood_prompts),
            "locality_ground_truth": list(req.neighborhood_answers),
            "known": {"first_token": flags.first_token, "whole": flags.whole, "rule": rule},
            "origin": {"file": stem, "format": req.source, "case_id": req.case_id}}


def scan_known(model, tok, files: Sequence[str | os.PathLike], rule: str = "whole", limit: int = 0,
               batch_size: int = 32, progress: bool = False) -> KnownScan:
    """Read each request file (its first ``limit`` records when > 0; invalid records are skipped
    and logged) and keep the records the model knows under ``rule`` that an edit accepts (a
    subject at the prompt's position 0 is refused: :func:`mobiedit.prompts.subject_context_error`;
    counted in ``refused``)."""
    if rule not in RULES:
        raise ConfigError(f"unknown rule {rule!r}", where="--rule", fix=f"use one of {RULES}")
    if limit < 0:
        raise ConfigError(f"--limit is {limit}", where="--limit", fix="pass 0 (all) or a positive count")
    if not files:
        raise ConfigError("no request files", where="--from", fix="pass one or more request files")
    if batch_size < 1:
        raise ConfigError(f"--batch-size is {batch_size}", where="--batch-size", fix="pass a positive batch size, e.g. 16")
    stems = [Path(f).name.removesuffix(".jsonl").removesuffix(".json") for f in files]
    if len(set(stems)) != len(stems):
        raise ConfigError(f"two request files share a name: {stems}", where="--from",
                          fix="pass files with distinct names (their names prefix the case ids)")
    scan = KnownScan(rule=rule)
    t0 = time.perf_counter()
    for f, stem in zip(files, stems):
        reqs = load_requests(f, skip_invalid=True)
        reqs = reqs[:limit] if limit else reqs
        count = SourceCount(stem, read=len(reqs))
        scorable = [r for r in reqs if r.target_true is not None]
        count.scored = len(scorable)
        if len(scorable) < len(reqs):
            log.warning("%s: %d records have no true answer and are not scored", stem, len(reqs) - len(scorable))
        flags = known_flags(model, tok, [r.rewrite_prompt for r in scorable], [r.target_true for r in scorable],
                            batch_size=batch_size, progress=progress)
        count.first_token = sum(f_.first_token for f_ in flags)
        count.whole = sum(f_.whole for f_ in flags)
        kept = [(r, f_) for r, f_ in zip(scorable, flags) if f_.passes(rule)]
        editable = [(r, f_) for r, f_ in kept if request_refusal(tok, r) is None]
        count.refused = len(kept) - len(editable)
        if count.refused:
            log.warning("%s: %d known records left out: their subject is the prompt's first token and the "
                        "tokenizer adds no BOS (an edit refuses them)", stem, count.refused)
        scan.records += [flat_record(r, stem, f_, rule) for r, f_ in editable]
        scan.counts.append(count)
        log.info("%s: %d read, %d known (first token), %d known (whole answer)", stem, count.read,
                 count.first_token, count.whole)
    scan.seconds = time.perf_counter() - t0
    return scan


def write_known(path: str | os.PathLike, scan: KnownScan) -> None:
    """Write the kept records as a JSON list, atomically. An empty result is an error (nothing to
    edit), so no empty request file is left for a later run to trip on."""
    if not scan.records:
        raise ConfigError("the model knows none of the scanned records (nothing written)", where="--from",
                          fix="scan more records (--limit 0), or use --rule first-token")
    atomic_write_text(path, json.dumps(scan.records, ensure_ascii=False, indent=1) + "\n")
