"""The fact LM's pretraining corpus, built from the bundled CounterFact facts.

Real LMs store a fact at its subject because they read it in many phrasings. This module mines
each relation's phrasings from the data itself — every prompt with its subject replaced by a slot
is a *template*; templates are linked into relations when one record uses both (prompt and
rephrase) and filtered by the objects they take — and renders every fact in several of them, as
statements and as questions, beside the three sentences the records give verbatim.

Contract: :func:`build_corpus` is a pure function of (records, extra records, config); the same
inputs give the same sentences in the same order (a seeded ``random.Random`` chooses templates).
"""
from __future__ import annotations

import collections
import random
import re
from dataclasses import dataclass, field

_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s+")


@dataclass(frozen=True)
class Fact:
    """One (subject, object) association with the templates it is rendered in."""

    subject: str
    obj: str
    templates: tuple[str, ...]
    verbatim: tuple[str, ...] = ()  # full prompts given by the dataset (trained verbatim)


@dataclass
class TemplateBank:
    """Relation templates mined from records.

    ``component[t]`` names the relation (union-find root) of template ``t``; ``objects[t]`` counts
    the objects ``t`` was seen with.
    """

    component: dict[str, str] = field(default_factory=dict)
    objects: dict[str, collections.Counter] = field(default_factory=lambda: collections.defaultdict(collections.Counter))

    def candidates(self, template: str, obj: str) -> list[str]:
        """Templates of ``template``'s relation that were seen taking ``obj`` (most used first)."""
        root = self.component.get(template)
        if root is None:
            return []
        same = [t for t, r in self.component.items() if r == root and self.objects[t][obj] > 0]
        return sorted(same, key=lambda t: (-self.objects[t][obj], t))


def to_template(prompt: str, subject: str) -> str | None:
    """``prompt`` with ``subject`` replaced by ``{}``, minus any leading unrelated sentences.

    CounterFact's paraphrases prefix a random sentence ("Foo. Bar. {subject} is ..."); the part
    from the last sentence end before the subject on is the relation template. None when the
    subject does not occur.
    """
    i = prompt.find(subject)
    if i < 0:
        return None
    head = prompt[:i]
    ends = [m.end() for m in _SENTENCE_END.finditer(head)]
    if ends:
        head = head[ends[-1]:]
    return head + "{}" + prompt[i + len(subject):]


def mine_templates(records: list[dict]) -> TemplateBank:
    """Link the templates of each record's prompt and rephrase into relations (union-find)."""
    parent: dict[str, str] = {}

    def find(x: str) -> str:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    bank = TemplateBank()
    for r in records:
        ts = [t for t in (to_template(r["prompt"], r["subject"]), to_template(r["rephrase_prompt"], r["subject"])) if t]
        for t in ts:
            bank.objects[t][r["ground_truth"]] += 1
            find(t)
        if len(ts) == 2:
            parent[find(ts[0])] = find(ts[1])
    bank.component = {t: find(t) for t in parent}
    return bank


def match_subject(prompt: str, bank: TemplateBank, obj: str) -> tuple[str, str] | None:
    """Find (template, subject) such that ``template`` filled with ``subject`` is ``prompt``.

    Used for locality prompts, whose subject the flat format does not give. Only templates that
    take ``obj`` are tried; the longest matching template wins.
    """
    best = None
    for t, objs in bank.objects.items():
        if objs[obj] == 0 or t.count("{}") != 1:
            continue
        pre, post = t.split("{}")
        if prompt.startswith(pre) and prompt.endswith(post) and len(prompt) > len(pre) + len(post):
            subj = prompt[len(pre):len(prompt) - len(post)] if post else prompt[len(pre):]
            if subj.strip() == subj and (best is None or len(t) > len(best[0])):
                best = (t, subj)
    return best


def facts_from_records(records: list[dict], bank: TemplateBank, n_templates: int,
                       rng: random.Random) -> list[Fact]:
    """The main fact and the locality fact of each record, each with up to ``n_templates`` templates."""
    facts: list[Fact] = []
    for r in records:
        t0 = to_template(r["prompt"], r["subject"])
        cands = bank.candidates(t0, r["ground_truth"]) if t0 else []
        facts.append(Fact(r["subject"], r["ground_truth"], _pick(cands, n_templates, rng),
                          (r["prompt"], r["rephrase_prompt"])))
        m = match_subject(r["locality_prompt"], bank, r["locality_ground_truth"])
        if m:
            lt, ls = m
            lc = bank.candidates(lt, r["locality_ground_truth"])
            facts.append(Fact(ls, r["locality_ground_truth"], _pick(lc, n_templates, rng),
                              (r["locality_prompt"],)))
        else:
            facts.append(Fact("", r["locality_ground_truth"], (), (r["locality_prompt"],)))
    return facts


def _pick(cands: list[str], n: int, rng: random.Random) -> tuple[str, ...]:
    if len(cands) <= n:
        return tuple(cands)
    return tuple(rng.sample(cands, n))


def question_form(template: str) -> str:
    """A question rendering of a statement template: 'Q: {} plays? A:'."""
    return "Q: " + template.rstrip(" ,") + "? A:"


def render(fact: Fact, questions: bool, card: bool) -> list[str]:
    """All training sentences of one fact (without BOS/EOS)."""
    out = [f"{p} {fact.obj}" for p in fact.verbatim]
    for t in fact.templates:
        out.append(t.replace("{}", fact.subject) + " " + fact.obj)
        if questions:
            out.append(question_form(t).replace("{}", fact.subject) + " " + fact.obj)
    if card and fact.subject:
        # the object right after the subject: its last token must itself predict the object,
        # so the fact is computed at the subject position (as real LMs' subject enrichment)
        out.append(f"{fact.subject} {fact.obj}")
    return out
