"""Edit metrics in the field's two conventions.

* **Token accuracy** (EasyEdit): teacher-forced, the share of target tokens that are the argmax.
  Efficacy on the rewrite prompt, generalization on the paraphrases (both toward ``target_new``);
  locality = share of the neighbour's answer tokens whose argmax is unchanged by the edit
  (post vs pre predictions; when no pre-edit model is available, vs the neighbour's answer).
* **Probability** (ROME): efficacy/generalization succeed when P(new) > P(true) (mean-token NLL
  compared), locality when the neighbour's own answer keeps P(answer) > P(new).

Contract: evaluation never changes the model; all passes run under ``torch.no_grad``.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

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


@dataclass
class PreEdit:
    """What locality needs from the unedited model: its argmax tokens on each neighbour prompt."""

    neighbour_argmax: list[list[int]] = field(default_factory=list)


def pre_edit_snapshot(model, tok, req: EditRequest) -> PreEdit:
    """Run the unedited model on the request's neighbour prompts."""
    if not req.neighborhood_prompts:
        return PreEdit([])
    tf = teacher_forced(model, tok, list(req.neighborhood_prompts), list(req.neighborhood_answers))
    return PreEdit(tf.argmax)


def score_request(model, tok, req: EditRequest, pre: PreEdit | None) -> RequestScores:
    """All six scores of ``req`` on ``model`` (edited). ``pre`` None: locality vs the answers."""
    prompts = [req.rewrite_prompt, *req.paraphrase_prompts]
    new = teacher_forced(model, tok, prompts, [req.target_new] * len(prompts))
    acc = token_acc(new)
    true_t = req.target_true
    if true_t:
        old = teacher_forced(model, tok, prompts, [true_t] * len(prompts))
        prob = [float(n < o) for n, o in zip(new.nll, old.nll)]
    else:
        prob = [float("nan")] * len(prompts)
    loc_acc, loc_prob = float("nan"), float("nan")
    if req.neighborhood_prompts:
        nb = list(req.neighborhood_prompts)
        keep = teacher_forced(model, tok, nb, list(req.neighborhood_answers))
        ref = pre.neighbour_argmax if pre is not None and pre.neighbour_argmax else keep.targets
        loc_acc = _mean([sum(int(a == b) for a, b in zip(x, y)) / len(y) for x, y in zip(keep.argmax, ref)])
        flip = teacher_forced(model, tok, nb, [req.target_new] * len(nb))
        loc_prob = _mean([float(k < f) for k, f in zip(keep.nll, flip.nll)])
    return RequestScores(
        case_id=req.case_id, efficacy_acc=acc[0], generalization_acc=_mean(acc[1:]),
        locality_acc=loc_acc, efficacy_prob=prob[0], generalization_prob=_mean(prob[1:]),
        locality_prob=loc_prob, locality_reference="pre-edit" if pre is not None else "answer")


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


METRICS = ("efficacy_acc", "generalization_acc", "locality_acc", "efficacy_prob",
           "generalization_prob", "locality_prob")


def aggregate(scores: list[RequestScores]) -> dict[str, float]:
    """Mean of each metric over requests, in percent."""
    return {m: 100.0 * _mean([getattr(s, m) for s in scores]) for m in METRICS} | {"n": len(scores)}


def scores_json(scores: list[RequestScores]) -> list[dict]:
    return [asdict(s) for s in scores]


def format_table(agg: dict[str, float], title: str = "") -> str:
    """A small aligned text table of an aggregate."""
    head = f"{'metric':<22}{'value':>8}"
    rows = [f"{m:<22}{agg[m]:>8.1f}" for m in METRICS]
    return "\n".join(([title] if title else []) + [head, *rows, f"{'requests':<22}{agg['n']:>8d}"])
