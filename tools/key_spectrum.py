"""The edit layer's key statistics seen by the sequential update rules (issue 16).

Prints the spectrum of ``C = E[k kᵀ]`` (the statistics ROME's ``C⁻¹`` and the null-space projector
are built from), how many dimensions the ``nullspace`` rule's projector keeps at several
thresholds and what share of the subjects' keys lies in them, and the keys' Mahalanobis norm
``kᵀC⁻¹k`` (the corpus's mean is ``d``)::

    python tools/key_spectrum.py --preset default --n 70
    python tools/key_spectrum.py --model smollm2-135m --n 50
"""
from __future__ import annotations

import argparse
import json

import torch


def spectrum_report(c: torch.Tensor, keys: torch.Tensor, thresholds: list[float], ridge: float) -> dict:
    """The figures this tool prints, from ``c`` [d, d] and subject keys ``keys`` [n, d]."""
    from mobiedit.editing.update import null_space_projector

    c64, k64 = c.double(), keys.double()
    lam = torch.linalg.eigvalsh(c64)
    ci = torch.linalg.inv(c64 + ridge * torch.diagonal(c64).mean() * torch.eye(c64.shape[0], dtype=c64.dtype))
    maha = torch.einsum("ni,ij,nj->n", k64, ci, k64)
    rows = []
    for th in thresholds:
        p = null_space_projector(c64.float(), th).double()
        share = (k64 @ p).norm(dim=1) / k64.norm(dim=1)
        rows.append({"threshold": th, "absolute": th * float(lam.max()), "dims": int(round(float(torch.trace(p)))),
                     "key_share_mean": float(share.mean()), "key_share_min": float(share.min())})
    return {"d": c.shape[0], "trace": float(lam.sum()), "top5": [float(x) for x in lam.flip(0)[:5]],
            "median": float(lam.median()), "min": float(lam.min()),
            "key_norm_sq_median": float((k64 ** 2).sum(1).median()),
            "mahalanobis_median": float(maha.median()), "projector": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", help="local HF folder or checkpoint name")
    g.add_argument("--preset", default="default", help="fact LM preset when --model is absent")
    p.add_argument("--n", type=int, default=70, help="subject keys: the first N bundled CounterFact requests")
    p.add_argument("--thresholds", default="1e-4,2e-4,5e-4,1e-3,1e-2", help="nullspace_threshold values")
    args = p.parse_args()

    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.editing.compute_k import compute_key
    from mobiedit.factlm import ensure_fact_lm
    from mobiedit.models import load_model
    from mobiedit.requests import bundled_path, load_requests
    from mobiedit.resolve import edit_layer_for, method_config
    from mobiedit.session import prepare

    torch.set_num_threads(1)
    model_dir = resolve_model_arg(args.model) if args.model else ensure_fact_lm(args.preset)
    layer = edit_layer_for(model_dir, None)
    cfg = method_config("rome", layer, None, 0, model_dir)
    lm = load_model(model_dir)
    ctx = prepare(lm, cfg, 0)
    reqs = load_requests(bundled_path("counterfact-edit-1k.json"))[: args.n]
    keys = torch.stack([compute_key(lm.model, lm.family, layer, lm.tokenizer, ctx.templates, r.rewrite_prompt,
                                    r.subject)[0] for r in reqs])
    rep = spectrum_report(ctx.mom2[layer], keys, [float(x) for x in args.thresholds.split(",")], cfg.mom2_ridge)
    print(json.dumps({"model": str(model_dir), "layer": layer, **rep}, indent=1))


if __name__ == "__main__":
    main()
