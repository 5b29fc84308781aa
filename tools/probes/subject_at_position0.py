"""Probe: what a rank-one edit keyed at position 0 does (a subject that opens the prompt of a model
whose tokenizer adds no BOS, e.g. SmolLM2). For each request, ROME's edit is written with ``force``
(``mobiedit edit`` refuses such a request now, so the probe calls the method directly) and reports
the update's norm, its output ``‖ΔW k_t‖`` over the held-out perplexity windows (position 0 and the
rest, beside the layer's own output there) and the held-out perplexity before and after::

    python tools/probes/subject_at_position0.py --model smollm2-135m --requests mobiedit/data/known/smollm2-135m.json \\
        --case counterfact-edit-1k/17674 --case counterfact-edit-1k/16781 --case counterfact-edit-1k/13573 --out F.json
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main() -> None:
    from mobiedit import api
    from mobiedit.ability import heldout_windows
    from mobiedit.corpora import heldout_texts
    from mobiedit.families import get_module
    from mobiedit.hooks import record
    from mobiedit.prompts import subject_last_index
    from mobiedit.requests import load_requests
    from mobiedit.resolve import edit_layer_for, method_config
    from mobiedit.session import apply_outcome, prepare, run_method

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--requests", required=True)
    ap.add_argument("--case", action="append", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    torch.set_num_threads(1)
    lm = api.load_model(a.model)
    cfg = method_config("rome", edit_layer_for(lm.path, None), None, 0, lm.path)  # the profile's layer and settings
    ctx = prepare(lm, cfg, 0)
    reqs = {r.case_id: r for r in load_requests(a.requests)}
    windows = heldout_windows(lm.tokenizer, heldout_texts(), 2048, 256)
    mod = get_module(lm.model, lm.family.mlp_out, cfg.layer)
    with torch.no_grad(), record(mod, stop=True) as rec:
        lm.model(input_ids=windows)
    keys, outs = rec.input.float(), rec.output.float()

    def ppl() -> float:
        total = 0.0
        with torch.no_grad():
            for row in windows:
                lg = lm.model(input_ids=row[None]).logits[0, :-1].float()
                total += float((torch.logsumexp(lg, -1) - lg.gather(-1, row[1:, None]).squeeze(-1)).sum())
        return math.exp(total / (windows.shape[0] * (windows.shape[1] - 1)))

    w0 = mod.weight.detach().clone()
    res = {"layer": cfg.layer, "ppl_pre": ppl(), "layer_output_norm": {
        "position0_median": float(outs[:, 0].norm(dim=-1).median()),
        "later_median": float(outs[:, 1:].norm(dim=-1).median())}, "requests": []}
    for cid in a.case:
        req = reqs[cid]
        out = run_method(lm, req, cfg, ctx)  # the method alone: no refusal, as before this rule
        apply_outcome(lm, out)
        dw = mod.weight.detach().float() - w0.float()
        y = (keys @ dw.T if lm.family.weight_out_in else keys @ dw).norm(dim=-1)
        res["requests"].append({
            "case_id": cid, "prompt": req.rewrite_prompt, "subject_position": subject_last_index(
                lm.tokenizer, req.rewrite_prompt, req.subject), "succeeded": bool(out.succeeded),
            "update_norm": float(dw.norm()), "out_position0_median": float(y[:, 0].median()),
            "out_later_median": float(y[:, 1:].median()), "out_later_p99": float(y[:, 1:].quantile(0.99)),
            "ppl_post": ppl()})
        with torch.no_grad():
            mod.weight.copy_(w0)
        print(json.dumps(res["requests"][-1]), flush=True)
    Path(a.out).write_text(json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "requests"}))


if __name__ == "__main__":
    main()
