"""Where two searches' value deltas differ (issue 18): the same requests edited by several bench
rows, each searched delta compared — its norm, its cosine with the others', and what its rank-one
write does along the ray ``s·δ`` (s = 0.5 … 1.5) to the target NLL at the plain rewrite prompt and
at the request's paraphrases (prompts no search saw)::

    python tools/delta_compare.py --model smollm2-135m --requests mobiedit/data/known/smollm2-135m.json \\
        --cases counterfact-edit-1k/19268,counterfact-edit-1k/12265 \\
        --row rome=rome-lean --row rome-shallow=rome-lean:early_loss=0.5 --row fzoo=fzoo-stopw \\
        --out runs/delta_compare.json

``--row LABEL=ROW[:KEY=VALUE;...]``: a bench row (:data:`mobiedit.bench_rows.ROWS`) with dotted
settings (JSON values), so one row may appear twice with different settings. Each request is
searched once per row on the unedited model (:func:`mobiedit.session.run_once`), the write is
applied, measured and undone (the weights restored bit-exactly). The JSON (and ``.png``: the
paraphrase NLL against the plain prompt's, one point per row and request, at s = 1) is written
atomically.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import torch

log = logging.getLogger("delta_compare")
SCALES = (0.5, 0.75, 1.0, 1.25, 1.5)


def parse_row(item: str) -> tuple[str, str, tuple]:
    """``LABEL=ROW[:KEY=VALUE;...]`` -> (label, row, ((key, value), ...)); values read as JSON."""
    from mobiedit.errors import ConfigError

    label, eq, rest = item.partition("=")
    row, _, sets = rest.partition(":")
    if not eq or not label or not row:
        raise ConfigError(f"bad row {item!r}", where="--row", fix="write LABEL=ROW or LABEL=ROW:KEY=VALUE;KEY=VALUE")
    kv = []
    for part in (p for p in sets.split(";") if p):
        key, eq2, raw = part.partition("=")
        if not eq2 or not key:
            raise ConfigError(f"bad setting {part!r} in row {item!r}", where="--row", fix="write KEY=VALUE")
        try:
            kv.append((key, json.loads(raw)))
        except ValueError:
            kv.append((key, raw))
    return label, row, tuple(kv)


def ray(lm, ctx, req, cfg, delta: torch.Tensor) -> dict:
    """Target NLL at the plain prompt and (mean) at the paraphrases with ``s·delta`` written, per s."""
    from mobiedit.families import get_module
    from mobiedit.editing.update import write_factors
    from mobiedit.evaluate import teacher_forced
    from mobiedit.methods.rome import factors_from_delta

    weight = get_module(lm.model, lm.family.mlp_out, cfg.layer).weight
    out = {}
    for s in SCALES:
        u, w, _ = factors_from_delta(lm, ctx, req, cfg.layer, delta * s, cfg.mom2_ridge, cfg.update)
        saved = weight.detach().clone()
        write_factors(weight, u, w, lm.family.weight_out_in)
        try:  # one batched teacher-forced forward: the plain prompt, then the paraphrases
            prompts = [req.rewrite_prompt, *req.paraphrase_prompts]
            nll = teacher_forced(lm.model, lm.tokenizer, prompts, [req.target_new] * len(prompts)).nll
            out[f"{s:g}"] = {"plain": nll[0], "paraphrase": sum(nll[1:]) / len(nll[1:]) if nll[1:] else float("nan")}
        finally:
            with torch.no_grad():
                weight.copy_(saved)
    return out


def compare(lm, reqs, rows: dict, seed: int) -> list[dict]:
    """One record per request: per row the delta's norm, evaluations, verdict and ray; the cosines."""
    from mobiedit.session import forward_model_for, prepare, run_once

    first = next(iter(rows.values()))
    ctx = prepare(lm, first, seed)
    fwds = {label: forward_model_for(lm, cfg) for label, cfg in rows.items()}
    records = []
    for i, req in enumerate(reqs):
        rec: dict = {"case_id": req.case_id, "rows": {}}
        deltas = {}
        for label, cfg in rows.items():
            out = run_once(lm, req, cfg, ctx, fwds[label])
            deltas[label] = out.delta.double()
            rec["rows"][label] = {"norm": float(out.delta.norm()), "loss_evals": out.loss_evals,
                                  "sequences": out.sequences,
                                  "succeeded": out.succeeded, "ray": ray(lm, ctx, req, cfg, out.delta)}
            log.warning("request %d/%d %s %s: |delta| %.1f, %d evaluations, plain/paraphrase NLL at s=1 %.3f / %.3f",
                        i + 1, len(reqs), req.case_id, label, rec["rows"][label]["norm"], out.loss_evals,
                        rec["rows"][label]["ray"]["1"]["plain"], rec["rows"][label]["ray"]["1"]["paraphrase"])
        unit = {k: v / v.norm() for k, v in deltas.items()}
        labels = list(unit)
        rec["cosine"] = {f"{a}|{b}": float(unit[a] @ unit[b]) for j, a in enumerate(labels) for b in labels[j + 1:]}
        records.append(rec)
    return records


def summary(records: list[dict]) -> dict:
    """Per row the medians over requests; per pair the median cosine."""
    import statistics as st

    labels = list(records[0]["rows"])
    out = {"rows": {}, "cosine_median": {}}
    for lab in labels:
        rs = [r["rows"][lab] for r in records]
        out["rows"][lab] = {"norm_median": st.median(x["norm"] for x in rs),
                            "loss_evals_median": st.median(x["loss_evals"] for x in rs),
                            "sequences_median": st.median(x["sequences"] for x in rs),
                            "succeeded": sum(x["succeeded"] for x in rs),
                            "plain_nll_median": st.median(x["ray"]["1"]["plain"] for x in rs),
                            "paraphrase_nll_median": st.median(x["ray"]["1"]["paraphrase"] for x in rs)}
    for pair in records[0]["cosine"]:
        out["cosine_median"][pair] = st.median(r["cosine"][pair] for r in records)
    return out


def plot(records: list[dict], png: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mobiedit.atomic import save_png

    fig, ax = plt.subplots(figsize=(6, 4.5))
    for lab in records[0]["rows"]:
        xs = [r["rows"][lab]["ray"]["1"]["plain"] for r in records]
        ys = [r["rows"][lab]["ray"]["1"]["paraphrase"] for r in records]
        ax.scatter(xs, ys, label=lab)
    ax.set_xlabel("target NLL, plain rewrite prompt (written edit)")
    ax.set_ylabel("target NLL, paraphrases (mean)")
    ax.legend()
    ax.grid(alpha=0.3)
    save_png(fig, png)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", help="local HF folder or checkpoint name")
    g.add_argument("--preset", default="default", help="fact LM preset when --model is absent")
    p.add_argument("--requests", help="request file (default: bundled CounterFact 1k)")
    p.add_argument("--cases", help="comma-separated case ids (default: the first --n)")
    p.add_argument("--n", type=int, default=3)
    p.add_argument("--layer", type=int, help="edit layer (default: the model profile's)")
    p.add_argument("--row", action="append", required=True, metavar="LABEL=ROW[:KEY=VALUE;...]")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/delta_compare.json")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.set_num_threads(1)

    from mobiedit.atomic import atomic_write_text
    from mobiedit.bench_rows import row_config
    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.factlm import ensure_fact_lm
    from mobiedit.models import load_model
    from mobiedit.profile import resolve_layer
    from mobiedit.quiet import quiet_libraries
    from mobiedit.requests import bundled_path, load_requests

    quiet_libraries()
    model_dir = Path(resolve_model_arg(args.model)) if args.model else ensure_fact_lm(args.preset)
    layer = resolve_layer(model_dir, args.layer)
    rows = {}
    for item in args.row:
        label, row, sets = parse_row(item)
        rows[label] = row_config(row, layer, args.seed, sets, model_dir)
    reqs = load_requests(args.requests or bundled_path("counterfact-edit-1k.json"))
    if args.cases:
        by_id = {r.case_id: r for r in reqs}
        reqs = [by_id[c] for c in args.cases.split(",")]
    else:
        reqs = reqs[:args.n]
    records = compare(load_model(model_dir), reqs, rows, args.seed)
    res = {"model": str(model_dir), "layer": layer, "rows": {k: v for k, v in zip(rows, args.row)},
           "summary": summary(records), "requests": records}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(res, indent=1))
    plot(records, out.with_suffix(".png"))
    print(json.dumps(res["summary"], indent=1))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
