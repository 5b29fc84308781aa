"""How far an edited subject's key moves after its edit, as later edits accumulate: the key a
protected write stored against the key the model now produces.

A harness, outside the installed package. For the i-th applied edit of a ``sequential --work``
row's journal (every ``--every``-th of the first ``--first``), it rebuilds the model with the first
i edits (:func:`tools.probe_drift.edited_weights`) and reads the subject's key at ``--layer`` (the
input of ``mlp_out`` at the subject's last token, plain prompt), then rebuilds it with the first N
edits for each N of ``--after`` and reads it again: the relative change ``‖k_N − k_i‖ / ‖k_i‖`` and
the cosine. A spread write's upper layer reads keys that its lower layer's later edits move; its
lowest layer's keys cannot move (nothing below it is written).

    python tools/key_drift.py --model smollm2-135m --requests mobiedit/data/known/smollm2-135m.json \\
        --journal WORK/ROW/journal --layer 5 --after 100 200 297 --out F
"""
from __future__ import annotations

import argparse
import functools
import statistics

import torch

from mobiedit.editing.compute_k import keys_at_subject
from mobiedit.journal import Journal
from mobiedit.models import load_model
from mobiedit.requests import load_requests
from mobiedit.resolve import model_dir
from tools.probe_drift import applied_requests, edited_weights, save_json


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", required=True)
    ap.add_argument("--journal", required=True)
    ap.add_argument("--layer", type=int, required=True)
    ap.add_argument("--after", type=int, nargs="+", required=True, help="applied-edit counts to compare at")
    ap.add_argument("--first", type=int, default=50)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    torch.set_num_threads(1)
    lm = load_model(model_dir(a.model))
    by_case = {r.case_id: r for r in load_requests(a.requests)}
    journal = Journal.open(a.journal, readonly=True)
    applied = applied_requests(journal)
    if max(a.after) > len(applied) or a.first > min(a.after):
        ap.error(f"--after must be within the journal's {len(applied)} applied edits and --first at most min(--after)")

    @functools.lru_cache(maxsize=len(a.after))  # each --after state is read once per subject
    def weights_with(n: int) -> dict[str, torch.Tensor]:
        return edited_weights(journal, n)[0]

    def key_with(weights: dict[str, torch.Tensor], req) -> torch.Tensor:
        with torch.no_grad():
            for m, w in weights.items():
                lm.model.get_submodule(m).weight.copy_(w)
        return keys_at_subject(lm.model, lm.family, a.layer, lm.tokenizer, [req.rewrite_prompt], req.subject)[0][0]

    rows = []
    for i in range(a.every, a.first + 1, a.every):
        req = by_case[applied[i - 1]["case_id"]]
        k_then = key_with(edited_weights(journal, i)[0], req)
        for n in a.after:
            k_now = key_with(weights_with(n), req)
            rows.append({"edit": i, "case_id": req.case_id, "after": n,
                         "rel_change": float((k_now - k_then).norm() / k_then.norm()),
                         "cosine": float(torch.nn.functional.cosine_similarity(k_now, k_then, dim=0))})
    summary = {}
    for n in a.after:
        sel = [r for r in rows if r["after"] == n]
        summary[n] = {"rel_change_median": statistics.median(r["rel_change"] for r in sel),
                      "rel_change_max": max(r["rel_change"] for r in sel),
                      "cosine_median": statistics.median(r["cosine"] for r in sel),
                      "cosine_min": min(r["cosine"] for r in sel)}
        print(f"after {n} edits: key change median {summary[n]['rel_change_median']:.3f} "
              f"(max {summary[n]['rel_change_max']:.3f}), cosine median {summary[n]['cosine_median']:.3f} "
              f"(min {summary[n]['cosine_min']:.3f}) over {len(sel)} edited subjects")
    result = {"model": a.model, "journal": a.journal, "layer": a.layer, "summary": summary, "rows": rows}
    save_json(a.out, result)
    return result


if __name__ == "__main__":
    main()
