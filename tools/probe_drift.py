"""Which never-edited facts a sequential row breaks, and which edit took them: a probe's true answer
before and after the first N edits of a journal, and the edited request whose key is nearest.

A harness, outside the installed package. It rebuilds the edited model from a ``sequential --work``
row's journal (base weights + the first N applied edits, in id order: :meth:`Journal.rebuild`'s
rule), scores the probe requests ``requests[n : n + probe]`` — the requests the row never edits —
teacher-forced on their true answers (``mobiedit.sequential_run.probe_true_acc``'s definition, per
probe), reads the greedy first answer token before and after, and, for each probe, finds the edited
request with the largest cosine between the two subjects' keys (``mlp_out``'s input at the subject's
last token of the plain prompt, unedited model, ``--layer``). A probe that now answers with its
nearest edit's new target was overwritten by that edit's key overlap; one whose answer moved
elsewhere was not.

    python tools/probe_drift.py --model smollm2-135m --requests mobiedit/data/known/smollm2-135m.json \
        --n 425 --journal WORK/ROW/journal --upto 25 --layer 5 --out results/x/probe_drift_25.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from mobiedit.atomic import atomic_write_text
from mobiedit.editing.compute_k import keys_at_subject
from mobiedit.evaluate import teacher_forced, token_acc
from mobiedit.journal import Journal
from mobiedit.resolve import model_dir
from mobiedit.models import load_model
from mobiedit.prompts import prompt_ids, target_ids
from mobiedit.requests import load_requests


def save_json(out: str | None, result: dict) -> None:
    """Write ``result`` to ``out`` (if given) atomically, creating its folder."""
    if out:
        Path(out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out, json.dumps(result, indent=1))


def applied_requests(journal: Journal) -> list[dict]:
    """The stored requests of ``journal``'s applied edits, in id order; a spread edit's entries
    (one per layer, all with the edit's request) give one request."""
    requests: dict[str, dict] = {}
    for e in journal.entries(active_only=True):
        requests.setdefault(e.request["case_id"], e.request)
    return list(requests.values())


def edited_weights(journal: Journal, upto: int) -> tuple[dict[str, torch.Tensor], list[dict]]:
    """Every module ``journal`` touched, rebuilt with its first ``upto`` applied edits
    (:meth:`Journal.rebuild`), and those edits' stored requests."""
    requests = applied_requests(journal)[:upto]
    cases = {r["case_id"] for r in requests}
    entries = journal.entries(active_only=True)
    ids = {e.id for e in entries if e.request["case_id"] in cases}
    return {m: journal.rebuild(m, only=ids) for m in {e.module for e in entries}}, requests


def first_tokens(model, tok, prompts: list[str], answers: list[str]) -> tuple[list[str], list[float], list[int]]:
    """After each prompt: the greedy next token (decoded), the probability of the answer's first
    token and its rank (0: the greedy token)."""
    out, probs, ranks = [], [], []
    for p, a in zip(prompts, answers):
        ids = torch.tensor([prompt_ids(tok, p)])
        with torch.no_grad():
            logp = torch.log_softmax(model(input_ids=ids).logits[0, -1].float(), -1)
        first = target_ids(tok, a)[0]
        out.append(tok.decode([int(logp.argmax())]))
        probs.append(float(logp[first].exp()))
        ranks.append(int((logp > logp[first]).sum()))
    return out, probs, ranks


def subject_keys(lm, layer: int, reqs) -> torch.Tensor:
    """Unit keys [n, d_in] at each request's subject, plain prompt."""
    ks = torch.cat([keys_at_subject(lm.model, lm.family, layer, lm.tokenizer, [r.rewrite_prompt], r.subject)[0] for r in reqs])
    return torch.nn.functional.normalize(ks, dim=-1)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", required=True)
    ap.add_argument("--n", type=int, required=True, help="the row's --n (the probe follows the edits)")
    ap.add_argument("--probe", type=int, default=20)
    ap.add_argument("--journal", required=True)
    ap.add_argument("--upto", type=int, required=True, help="apply the first N applied edits")
    ap.add_argument("--layer", type=int, required=True, help="the layer whose keys are compared")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    lm = load_model(model_dir(a.model))
    reqs = load_requests(a.requests)
    probes = reqs[a.n:a.n + a.probe]
    journal = Journal.open(a.journal, readonly=True)
    weights, edited = edited_weights(journal, a.upto)
    if len(edited) < a.upto:
        ap.error(f"--upto {a.upto}: the journal holds {len(edited)} applied edits; pass at most that")
    edit_reqs = [r for r in reqs[:a.n] if r.case_id in {e["case_id"] for e in edited}]
    tok = lm.tokenizer
    prompts, trues = [p.rewrite_prompt for p in probes], [p.target_true for p in probes]
    sim = subject_keys(lm, a.layer, probes) @ subject_keys(lm, a.layer, edit_reqs).T
    before_acc = token_acc(teacher_forced(lm.model, tok, prompts, trues))
    before_tok, before_p, before_rank = first_tokens(lm.model, tok, prompts, trues)
    with torch.no_grad():
        for module, w in weights.items():
            lm.model.get_submodule(module).weight.copy_(w)
    after_acc = token_acc(teacher_forced(lm.model, tok, prompts, trues))
    after_tok, after_p, after_rank = first_tokens(lm.model, tok, prompts, trues)
    rows = []
    for i, p in enumerate(probes):
        j = int(sim[i].argmax())
        near = edit_reqs[j]
        rows.append({"case_id": p.case_id, "prompt": p.rewrite_prompt, "true": p.target_true,
                     "acc_before": before_acc[i], "acc_after": after_acc[i],
                     "first_before": before_tok[i], "first_after": after_tok[i],
                     "p_true_first_before": before_p[i], "p_true_first_after": after_p[i],
                     "rank_true_first_before": before_rank[i], "rank_true_first_after": after_rank[i],
                     "nearest_edit": near.case_id, "nearest_prompt": near.rewrite_prompt, "nearest_new": near.target_new,
                     "cosine": float(sim[i, j]),
                     "took_nearest_new": after_tok[i].strip() != "" and near.target_new.startswith(after_tok[i].strip())})
        print(f"{p.case_id:28s} {rows[-1]['acc_before']:.2f}>{rows[-1]['acc_after']:.2f} "
              f"{before_tok[i]!r:>12}>{after_tok[i]!r:<12} P(true) {before_p[i]:.2f}>{after_p[i]:.2f} rank {after_rank[i]} cos {float(sim[i, j]):.2f} {near.rewrite_prompt!r} -> {near.target_new!r}")
    result = {"model": a.model, "journal": a.journal, "upto": a.upto, "applied": len(edited), "layer": a.layer,
              "probe_true_acc_before": 100 * sum(before_acc) / len(before_acc),
              "probe_true_acc_after": 100 * sum(after_acc) / len(after_acc), "probes": rows}
    print(f"probe true-answer acc {result['probe_true_acc_before']:.1f} -> {result['probe_true_acc_after']:.1f} "
          f"after {len(edited)} edits; {sum(r['took_nearest_new'] for r in rows)} probes now say their nearest edit's new answer")
    save_json(a.out, result)
    return result


if __name__ == "__main__":
    main()
