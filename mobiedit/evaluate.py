"""Edit metrics in the field's conventions, and the general ability kept by an edit.

* **Token accuracy** (EasyEdit): teacher-forced, the share of target tokens that are the argmax.
  Efficacy on the rewrite prompt, generalization on the paraphrases (both toward ``target_new``).
* **Probability** (ROME): efficacy/generalization succeed when P(new) > P(true), each answer scored
  by its mean token log-probability, teacher-forced (ROME's ``test_batch_prediction``); locality
  when the neighbour's own answer keeps P(answer) > P(new).
* **Locality, two references**: ``locality_unchanged`` (EasyEdit) = share of the neighbour's answer
  positions whose argmax token is the same as under the *unedited* model (100 for an unedited
  model by construction); ``locality_truth`` = share whose argmax is the neighbour's ground-truth
  answer token. ``locality_acc`` keeps its old meaning: the former when a pre-edit snapshot is
  given, else the latter.
* **General ability** (with an :class:`~mobiedit.ability.AbilityProbe`): fluency = ROME's n-gram
  entropy of the greedy generation from the rewrite prompt, before and after; perplexity of
  held-out natural text before and after (:mod:`mobiedit.ability`).

Contract: evaluation never changes the model; all passes run under ``torch.no_grad``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from .ability import AbilityProbe
from .prompts import make_batch, prompt_ids, target_ids
from .requests import EditRequest


@dataclass
class TeacherForced:
    """Per prompt: argmax tokens at the target positions and the mean-token NLL of the target."""

    argmax: list[list[int]]
    targets: list[list[int]]
    nll: list[float]


def teacher_forced(model, tok, prompts: list[str], targets: list[str], batch_size: int = 64) -> TeacherForced:
    """Score ``prompt + " " + target`` for each pair in one or more batched forwards."""
    dev = next(model.parameters()).device
    am, tg, nll = [], [], []
    for i in range(0, len(prompts), batch_size):
        b = make_batch(tok, prompts[i:i + batch_size], targets[i:i + batch_size])
        with torch.no_grad():
            logits = model(input_ids=b.input_ids.to(dev), attention_mask=b.attention_mask.to(dev)).logits.float()
        logp = torch.log_softmax(logits, -1)
        for r in range(b.input_ids.shape[0]):
            pos = (b.labels[r] != -100).nonzero().flatten().to(dev)
            lab = b.labels[r].to(dev)[pos]
            am.append(logits[r, pos].argmax(-1).tolist())
            tg.append(lab.tolist())
            nll.append(float(-logp[r, pos, lab].mean()))
    return TeacherForced(am, tg, nll)


def token_acc(tf: TeacherForced) -> list[float]:
    return [sum(int(a == t) for a, t in zip(x, y)) / len(y) for x, y in zip(tf.argmax, tf.targets)]


def greedy_exact(model, tok, prompts: list[str], targets: list[str]) -> tuple[list[bool], list[bool]]:
    """Greedy decoding of len(target) tokens: (whole target exact, first token exact) per prompt."""
    dev = next(model.parameters()).device
    whole, first = [], []
    for p, t in zip(prompts, targets):
        tid = target_ids(tok, t)
        ids = torch.tensor([prompt_ids(tok, p)], device=dev)
        with torch.no_grad():
            for _ in range(len(tid)):
                nxt = model(input_ids=ids).logits[0, -1].argmax()
                ids = torch.cat([ids, nxt.view(1, 1)], 1)
        got = ids[0, -len(tid):].tolist()
        whole.append(got == tid)
        first.append(got[0] == tid[0])
    return whole, first


@dataclass
class RequestScores:
    """Scores of one request after its edit (each in [0, 1])."""

    case_id: str
    efficacy_acc: float
    generalization_acc: float
    locality_acc: float
    efficacy_prob: float
    generalization_prob: float
    locality_prob: float
    locality_reference: str = "pre-edit"
    locality_unchanged: float = float("nan")
    locality_truth: float = float("nan")
    fluency_pre: float = float("nan")
    fluency: float = float("nan")
    perplexity_pre: float = float("nan")
    perplexity: float = float("nan")


@dataclass
class PreEdit:
    """What the unedited model gives: argmax tokens on each neighbour prompt (for locality) and,
    with an ability probe, the fluency of its generation from the rewrite prompt."""

    neighbour_argmax: list[list[int]] = field(default_factory=list)
    fluency: float = float("nan")


def pre_edit_snapshot(model, tok, req: EditRequest, ability: AbilityProbe | None = None) -> PreEdit:
    """Run the unedited model on the request's neighbour prompts (and its rewrite prompt's
    generation when ``ability`` is given)."""
    flu = ability.fluency(model, tok, req.rewrite_prompt) if ability is not None else float("nan")
    if not req.neighborhood_prompts:
        return PreEdit([], flu)
    tf = teacher_forced(model, tok, list(req.neighborhood_prompts), list(req.neighborhood_answers))
    return PreEdit(tf.argmax, flu)


def score_request(model, tok, req: EditRequest, pre: PreEdit | None,
                  ability: AbilityProbe | None = None) -> RequestScores:
    """All scores of ``req`` on ``model`` (edited). ``pre`` None: no unedited reference, so
    ``locality_unchanged`` is NaN and ``locality_acc`` falls back to the answers. ``ability``
    (built on the unedited model at the edit layer) adds fluency and perplexity."""
    prompts = [req.rewrite_prompt, *req.paraphrase_prompts]
    new = teacher_forced(model, tok, prompts, [req.target_new] * len(prompts))
    acc = token_acc(new)
    true_t = req.target_true
    if true_t:
        old = teacher_forced(model, tok, prompts, [true_t] * len(prompts))
        prob = [float(n < o) for n, o in zip(new.nll, old.nll)]
    else:
        prob = [float("nan")] * len(prompts)
    loc_unchanged, loc_truth, loc_prob = float("nan"), float("nan"), float("nan")
    has_pre = pre is not None and bool(pre.neighbour_argmax)
    if req.neighborhood_prompts:
        nb = list(req.neighborhood_prompts)
        keep = teacher_forced(model, tok, nb, list(req.neighborhood_answers))
        loc_truth = _mean(_agreement(keep.argmax, keep.targets))
        if has_pre:
            loc_unchanged = _mean(_agreement(keep.argmax, pre.neighbour_argmax))
        flip = teacher_forced(model, tok, nb, [req.target_new] * len(nb))
        loc_prob = _mean([float(k < f) for k, f in zip(keep.nll, flip.nll)])
    extra = {}
    if ability is not None:
        extra = {"fluency_pre": pre.fluency if pre is not None else float("nan"),
                 "fluency": ability.fluency(model, tok, req.rewrite_prompt),
                 "perplexity_pre": ability.perplexity_pre, "perplexity": ability.perplexity()}
    return RequestScores(
        case_id=req.case_id, efficacy_acc=acc[0], generalization_acc=_mean(acc[1:]),
        locality_acc=loc_unchanged if has_pre else loc_truth, efficacy_prob=prob[0],
        generalization_prob=_mean(prob[1:]), locality_prob=loc_prob,
        locality_reference="pre-edit" if pre is not None else "answer",
        locality_unchanged=loc_unchanged, locality_truth=loc_truth, **extra)


def _agreement(got: list[list[int]], ref: list[list[int]]) -> list[float]:
    """Per prompt: share of positions where ``got`` equals ``ref``."""
    return [sum(int(a == b) for a, b in zip(x, y)) / len(y) for x, y in zip(got, ref)]


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


METRICS = ("efficacy_acc", "generalization_acc", "locality_acc", "efficacy_prob",
           "generalization_prob", "locality_prob")
#: locality against its two references (EasyEdit's unchanged-vs-unedited; the ground truth)
LOCALITY_METRICS = ("locality_unchanged", "locality_truth")
#: general ability: means in their own units (bits; perplexity), not percentages
ABILITY_METRICS = ("fluency_pre", "fluency", "perplexity_pre", "perplexity")


def aggregate(scores: list[RequestScores]) -> dict[str, float]:
    """Mean of each metric over requests: rates in percent, ability metrics in their units, and
    ``perplexity_change_pct`` = mean of 100·(ppl/ppl_pre − 1). Metrics a run did not compute are NaN."""
    agg = {m: 100.0 * _mean([getattr(s, m) for s in scores]) for m in METRICS + LOCALITY_METRICS}
    agg |= {m: _mean([getattr(s, m) for s in scores]) for m in ABILITY_METRICS}
    agg["perplexity_change_pct"] = perplexity_change_pct([(s.perplexity_pre, s.perplexity) for s in scores])
    return agg | {"n": len(scores)}


def perplexity_change_pct(pairs: list[tuple[float, float]]) -> float:
    """Mean of 100·(ppl/ppl_pre − 1) over the (before, after) pairs that were measured (a NaN or
    non-positive ``ppl_pre`` is skipped); NaN when none was."""
    return _mean([100.0 * (post / pre - 1.0) for pre, post in pairs if pre == pre and pre > 0])


def scores_json(scores: list[RequestScores]) -> list[dict]:
    return [asdict(s) for s in scores]


_LABELS = {"efficacy_acc": "efficacy (token acc)", "generalization_acc": "generalization (acc)",
           "locality_acc": "locality (acc)", "efficacy_prob": "efficacy (P new>true)",
           "generalization_prob": "generalization (prob)", "locality_prob": "locality (P ans>new)",
           "locality_unchanged": "locality (unchanged)", "locality_truth": "locality (truth)",
           "fluency_pre": "fluency before (bits)", "fluency": "fluency after (bits)",
           "perplexity_pre": "perplexity before", "perplexity": "perplexity after",
           "perplexity_change_pct": "perplexity change %"}


def format_table(agg: dict[str, float], title: str = "") -> str:
    """A small aligned text table of an aggregate: the six edit metrics, locality against both
    references, and the general-ability rows a run computed (NaN rows of those are left out).
    Each row starts with the metric's JSON key and its value (what scripts split on), then its label."""
    head = f"{'metric':<24}{'value':>9}  meaning"
    rows = [f"{m:<24}{agg.get(m, float('nan')):>9.1f}  {_LABELS[m]}" for m in METRICS + LOCALITY_METRICS]
    for m in (*ABILITY_METRICS, "perplexity_change_pct"):
        v = agg.get(m, float("nan"))
        if v == v:
            rows.append(f"{m:<24}{v:>9.3f}  {_LABELS[m]}")
    return "\n".join(([title] if title else []) + [head, *rows, f"{'requests':<24}{agg['n']:>9d}"])
