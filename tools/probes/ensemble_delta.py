"""Issue-18 probe: average R independent forward-only searches. Each search's delta is the edit's
direction plus the estimator's noise (cos ≈ 0.3 with ROME's delta on SmolLM2, docs/results.md);
searches under different direction seeds share the direction and not the noise, so their mean
should carry the direction with ~1/√R of the noise — and the paraphrases with it. The mean is then
handed to one more search (``start``) that stops on the shipped rule at the written edit, so the
result is an edit the product could make. Per request: ROME's delta (the reference), the shipped
search, the R seeded searches of ``--row``, their mean and the continued search — each with its
norm, evaluations, cosine with ROME's delta and the ray of its write (plain / paraphrase NLL)::

    python tools/probes/ensemble_delta.py --model smollm2-135m \\
        --requests mobiedit/data/known/smollm2-135m.json --n 4 --row fzoo-lr2 --seeds 0,1,2,3 \\
        --out runs/ensemble.json
    python tools/probes/ensemble_delta.py --replot results/probes/ensemble_delta_smollm2.json

The PNG beside the JSON draws each request's rays: paraphrase NLL against the plain prompt's as the
written delta is scaled (``SCALES``), for ROME's delta, the shipped search's, each seeded search's
and their mean. A probe (not a product path): the searches are run_once calls on the unedited model, the writes
measured and undone by ``tools/delta_compare.ray``.
"""
import argparse
import json
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.delta_compare import SCALES, parse_row, ray  # noqa: E402

log = logging.getLogger("ensemble_delta")


def entry(lm, ctx, req, cfg, out, ref) -> dict:
    d = out.delta.double()
    return {"norm": float(d.norm()), "loss_evals": out.loss_evals, "succeeded": out.succeeded,
            "cos_rome": float(d @ ref / (d.norm() * ref.norm())), "ray": ray(lm, ctx, req, cfg, out.delta)}


def probe(lm, reqs, base, rome_cfg, ship_cfg, seeds, seed) -> list[dict]:
    import dataclasses

    from mobiedit.session import forward_model_for, prepare, run_once

    ctx = prepare(lm, base, seed)
    fwd = forward_model_for(lm, base)
    fwd_ship = forward_model_for(lm, ship_cfg)
    records = []
    for i, req in enumerate(reqs):
        rome = run_once(lm, req, rome_cfg, ctx)
        ref = rome.delta.double()
        rec = {"case_id": req.case_id, "rome": entry(lm, ctx, req, rome_cfg, rome, ref)}
        rec["shipped"] = entry(lm, ctx, req, ship_cfg, run_once(lm, req, ship_cfg, ctx, fwd_ship), ref)
        deltas, rec["seeds"] = [], []
        for s in seeds:
            cfg = dataclasses.replace(base, zo=dataclasses.replace(base.zo, seed=s))
            out = run_once(lm, req, cfg, ctx, fwd)
            deltas.append(out.delta.detach().clone())
            rec["seeds"].append(entry(lm, ctx, req, cfg, out, ref))
        mean = torch.stack(deltas).mean(0)
        md = mean.double()
        rec["mean"] = {"norm": float(md.norm()), "cos_rome": float(md @ ref / (md.norm() * ref.norm())),
                       "ray": ray(lm, ctx, req, base, mean)}
        cont_cfg = dataclasses.replace(base, zo=dataclasses.replace(base.zo, seed=max(seeds) + 1))
        cont = run_once(lm, req, cont_cfg, ctx, fwd, start=mean)
        rec["continued"] = entry(lm, ctx, req, cont_cfg, cont, ref)
        rec["continued"]["loss_evals_total"] = cont.loss_evals + sum(x["loss_evals"] for x in rec["seeds"])
        records.append(rec)
        log.warning("request %d/%d %s: paraphrase NLL rome %.2f shipped %.2f seeds %s mean %.2f continued %.2f "
                    "(cos %.2f / %.2f / %s / %.2f / %.2f; evals %d / %d)", i + 1, len(reqs), req.case_id,
                    rec["rome"]["ray"]["1"]["paraphrase"], rec["shipped"]["ray"]["1"]["paraphrase"],
                    [round(x["ray"]["1"]["paraphrase"], 2) for x in rec["seeds"]],
                    rec["mean"]["ray"]["1"]["paraphrase"], rec["continued"]["ray"]["1"]["paraphrase"],
                    rec["rome"]["cos_rome"], rec["shipped"]["cos_rome"],
                    [round(x["cos_rome"], 2) for x in rec["seeds"]], rec["mean"]["cos_rome"],
                    rec["continued"]["cos_rome"], rec["shipped"]["loss_evals"],
                    rec["continued"]["loss_evals_total"])
    return records


def configs(model: str, row_spec: str, seed: int):
    """(model folder, layer, the seeded searches' config, ROME's, the shipped search's) — each
    row at the model profile's layer, ``row_spec`` ``ROW[:KEY=VALUE;...]``; quiets the libraries."""
    from mobiedit.bench_rows import row_config
    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.profile import resolve_layer
    from mobiedit.quiet import quiet_libraries

    quiet_libraries()
    model_dir = Path(resolve_model_arg(model))
    layer = resolve_layer(model_dir, None)
    _, row, sets = parse_row("x=" + row_spec)
    return (model_dir, layer, row_config(row, layer, seed, sets, model_dir),
            row_config("rome-lean", layer, seed, (), model_dir), row_config("fzoo-stopw", layer, seed, (), model_dir))


def plot(res: dict, png: Path) -> None:
    """One panel per request: the rays (plain NLL, paraphrase NLL) over the scales."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mobiedit.atomic import save_png

    reqs = res["requests"]
    if not reqs:
        return
    cols = 4
    rows = (len(reqs) + cols - 1) // cols
    fig, axes = plt.subplots(rows, cols, figsize=(4 * cols, 3.4 * rows), squeeze=False)

    def draw(ax, ray, **kw):
        keys = sorted(ray, key=float)
        ax.plot([ray[k]["plain"] for k in keys], [ray[k]["paraphrase"] for k in keys], marker="o", ms=3, **kw)

    for ax, rec in zip(axes.flat, reqs):
        draw(ax, rec["rome"]["ray"], color="k", label="ROME")
        draw(ax, rec["shipped"]["ray"], color="tab:red", label="shipped")
        for j, sd in enumerate(rec["seeds"]):
            draw(ax, sd["ray"], color="tab:gray", alpha=0.5, lw=0.8, label="seeded searches" if j == 0 else None)
        draw(ax, rec["mean"]["ray"], color="tab:blue", lw=2, label=f"mean of {len(rec['seeds'])}")
        ax.set_xscale("log")
        ax.set_title(rec["case_id"].split("/")[-1], fontsize=9)
        ax.set_xlabel("plain-prompt target NLL (written)", fontsize=8)
        ax.set_ylabel("paraphrase target NLL", fontsize=8)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(reqs):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"rays s·δ, s = {', '.join(f'{s:g}' for s in res['scales'])} ({res['row']} seeds {res['seeds']})", fontsize=10)
    save_png(fig, png, dpi=110)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--replot":
        src = Path(sys.argv[2])
        plot(json.loads(src.read_text()), src.with_suffix(".png"))
        print(f"wrote {src.with_suffix('.png')}")
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--requests", required=True)
    p.add_argument("--cases", help="comma-separated case ids (default: the first --n after --offset)")
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--row", default="fzoo-lr2", help="ROW[:KEY=VALUE;...] of the seeded searches")
    p.add_argument("--seeds", default="0,1,2,3")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.set_num_threads(1)

    from mobiedit.atomic import atomic_write_text
    from mobiedit.models import load_model
    from mobiedit.requests import load_requests

    model_dir, layer, base, rome_cfg, ship_cfg = configs(args.model, args.row, args.seed)
    reqs = load_requests(args.requests)
    if args.cases:
        by_id = {r.case_id: r for r in reqs}
        reqs = [by_id[c] for c in args.cases.split(",")]
    else:
        reqs = reqs[args.offset:args.offset + args.n]
    seeds = [int(s) for s in args.seeds.split(",")]
    records = probe(load_model(model_dir), reqs, base, rome_cfg, ship_cfg, seeds, args.seed)
    res = {"model": str(model_dir), "layer": layer, "row": args.row, "seeds": seeds, "scales": SCALES,
           "requests": records}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(res, indent=1))
    plot(res, out.with_suffix(".png"))
    print(f"wrote {out} and {out.with_suffix('.png')}")


if __name__ == "__main__":
    main()
