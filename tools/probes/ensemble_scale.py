"""Issue-18 probe, second form: the mean of R seeded forward-only searches, written at the scale
its own objective prefers, scored as the bench scores an edit.

Session 41's first probe (``tools/probes/ensemble_delta.py``) found on SmolLM2 that the mean of
four lr-2 searches keeps the rewrite prompt's NLL at half the norm and, unlike a single search's
delta, keeps lowering it when scaled up — where it then carries paraphrases as far as ROME's delta
at the same depth. This probe asks whether that is an edit the product could make without looking
at paraphrases: per request, candidates ``shipped`` (the shipped search), ``R1`` / ``R2`` / ``R4``
(the mean of the first 1 / 2 / 4 searches of ``--row`` under direction seeds 0…3) are each
written at every scale of ``--scales``; the scale kept is the one whose written edit holds on the
rewrite rows with the lowest objective there (:class:`mobiedit.methods.verify.WrittenJudge`'s loss
plus the decay term at ``s·‖δ‖``) — rewrite rows only, never paraphrases. Then the edited model is
scored with the bench's :func:`mobiedit.evaluate.score_request` (efficacy / generalization in both
conventions, neighbours unchanged), beside ROME's edit (``rome-lean``) and every candidate at s = 1::

    python tools/probes/ensemble_scale.py --model smollm2-135m \\
        --requests mobiedit/data/known/smollm2-135m.json --offset 8 --n 6 --out runs/ens_scale.json

Deltas are saved beside the JSON (``<out>/deltas.safetensors``). Several runs' results merged
into one table (means over requests in percent; evaluations and norms as medians)::

    python tools/probes/ensemble_scale.py --summary runs/ens_scale_a/result.json runs/ens_scale_b/result.json

A probe, not a product path.
"""
import argparse
import dataclasses
import json
import logging
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tools.probes.ensemble_delta import configs  # noqa: E402

log = logging.getLogger("ensemble_scale")
KEEP = ("efficacy_acc", "generalization_acc", "efficacy_prob", "generalization_prob", "locality_unchanged")


def written(lm, ctx, req, cfg, judge, delta, pre) -> dict:
    """Write ``delta``, score the edited model as the bench does, restore; plus the judge's verdict."""
    from mobiedit.editing.objective import decay_term
    from mobiedit.editing.update import write_factors
    from mobiedit.evaluate import score_request
    from mobiedit.families import get_module
    from mobiedit.methods.rome import factors_from_delta

    u, w, _ = factors_from_delta(lm, ctx, req, cfg.layer, delta, cfg.mom2_ridge, cfg.update)
    chk = judge(u, w, cfg.success_fraction, None)
    weight = get_module(lm.model, lm.family.mlp_out, cfg.layer).weight
    saved = weight.detach().clone()
    write_factors(weight, u, w, lm.family.weight_out_in)
    try:
        sc = dataclasses.asdict(score_request(lm.model, lm.tokenizer, req, pre))
    finally:
        with torch.no_grad():
            weight.copy_(saved)
    obj = chk.loss + float(decay_term(float(delta.norm()), judge.v_init_norm, cfg.objective))
    return {"holds": chk.holds, "written_loss": chk.loss, "objective": obj, "norm": float(delta.norm()),
            **{k: sc[k] for k in KEEP}}


def best_scale(lm, ctx, req, cfg, judge, delta, scales, pre) -> dict:
    """Every scale written; the kept one: holds, lowest objective (else s = 1)."""
    tried = {f"{s:g}": written(lm, ctx, req, cfg, judge, delta * s, pre) for s in scales}
    ok = [k for k, v in tried.items() if v["holds"]]
    pick = min(ok, key=lambda k: tried[k]["objective"]) if ok else "1"
    return {"scale": float(pick), "chosen": tried[pick], "at1": tried["1"], "tried": tried}


def probe(lm, reqs, base, rome_cfg, ship_cfg, seeds, seed, scales, out_dir: Path) -> list[dict]:
    from safetensors.torch import save_file

    from mobiedit.atomic import atomic_path
    from mobiedit.evaluate import pre_edit_snapshot
    from mobiedit.methods.verify import written_judge
    from mobiedit.session import forward_model_for, prepare, run_once

    ctx = prepare(lm, base, seed)
    fwd, fwd_ship = forward_model_for(lm, base), forward_model_for(lm, ship_cfg)
    records, tensors = [], {}
    for i, req in enumerate(reqs):
        pre = pre_edit_snapshot(lm.model, lm.tokenizer, req)
        judge = written_judge(lm, req, base.layer, ctx, base.objective)
        rome = run_once(lm, req, rome_cfg, ctx)
        ship = run_once(lm, req, ship_cfg, ctx, fwd_ship)
        runs = [run_once(lm, req, dataclasses.replace(base, zo=dataclasses.replace(base.zo, seed=s)), ctx, fwd)
                for s in seeds]
        rec = {"case_id": req.case_id, "rome": {"loss_evals": rome.loss_evals, **written(lm, ctx, req, rome_cfg, judge, rome.delta, pre)}}
        cands = {"shipped": (ship.delta, ship.loss_evals)}
        for r in (1, 2, 4):
            if r <= len(runs):
                cands[f"R{r}"] = (torch.stack([x.delta for x in runs[:r]]).mean(0), sum(x.loss_evals for x in runs[:r]))
        for name, (delta, evals) in cands.items():
            rec[name] = {"loss_evals": evals, **best_scale(lm, ctx, req, base, judge, delta, scales, pre)}
            tensors[f"{i}.{name}"] = delta.detach().float().contiguous()
        tensors[f"{i}.rome"] = rome.delta.detach().float().contiguous()
        records.append(rec)
        log.warning("request %d/%d %s: genP rome %.2f | %s", i + 1, len(reqs), req.case_id,
                    rec["rome"]["generalization_prob"],
                    " | ".join(f"{n} s={rec[n]['scale']:g} genP {rec[n]['chosen']['generalization_prob']:.2f}"
                               f" (s=1 {rec[n]['at1']['generalization_prob']:.2f}) loc {rec[n]['chosen']['locality_unchanged']:.2f}"
                               f" evals {rec[n]['loss_evals']}" for n in cands))
        with atomic_path(out_dir / "deltas.safetensors", suffix=".safetensors") as tmp:
            save_file(tensors, str(tmp))
    return records


def summary(paths: list[str]) -> str:
    """The merged table: per candidate at s = 1 and at its picked scale, the bench's scores."""
    import statistics as st

    recs, seen = [], set()
    for path in paths:
        for r in json.loads(Path(path).read_text())["requests"]:
            if r["case_id"] in seen:
                raise SystemExit(f"case {r['case_id']} appears twice")
            seen.add(r["case_id"])
            recs.append(r)
    names = [n for n in ("shipped", "R1", "R2", "R4") if all(n in r for r in recs)]
    lines = [f"{len(recs)} requests",
             f"{'row':<14}{'eff':>6}{'gen':>6}{'effP':>6}{'genP':>6}{'locU':>6}{'holds':>7}{'evals':>7}{'scale':>7}{'norm':>7}"]

    def line(label, get, evals, scale=None):
        v = [100 * st.mean(get(r)[k] for r in recs) for k in KEEP]
        sc = f"{st.median(scale(r) for r in recs):>7.3g}" if scale else f"{'':>7}"
        lines.append(f"{label:<14}" + "".join(f"{x:6.1f}" for x in v)
                     + f"{100 * st.mean(get(r)['holds'] for r in recs):7.1f}{st.median(evals(r) for r in recs):7.0f}"
                     + sc + f"{st.median(get(r)['norm'] for r in recs):7.1f}")

    line("rome", lambda r: r["rome"], lambda r: r["rome"]["loss_evals"])
    for n in names:
        line(f"{n} s=1", lambda r, n=n: r[n]["at1"], lambda r, n=n: r[n]["loss_evals"])
        line(f"{n} picked", lambda r, n=n: r[n]["chosen"], lambda r, n=n: r[n]["loss_evals"], lambda r, n=n: r[n]["scale"])
    return "\n".join(lines)


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--summary":
        print(summary(sys.argv[2:]))
        return
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True)
    p.add_argument("--requests", required=True)
    p.add_argument("--offset", type=int, default=0)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--row", default="fzoo-lr2", help="ROW[:KEY=VALUE;...] of the seeded searches")
    p.add_argument("--seeds", default="0,1,2,3")
    p.add_argument("--scales", default="1,1.25,1.5,2,2.5")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, help="a directory: result.json and deltas.safetensors")
    args = p.parse_args()
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.set_num_threads(1)

    from mobiedit.atomic import atomic_write_text
    from mobiedit.models import load_model
    from mobiedit.requests import load_requests

    model_dir, layer, base, rome_cfg, ship_cfg = configs(args.model, args.row, args.seed)
    reqs = load_requests(args.requests)[args.offset:args.offset + args.n]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scales = [float(s) for s in args.scales.split(",")]
    if 1.0 not in scales:
        raise SystemExit("--scales must include 1")
    records = probe(load_model(model_dir), reqs, base, rome_cfg, ship_cfg,
                    [int(s) for s in args.seeds.split(",")], args.seed, scales, out)
    res = {"model": str(model_dir), "layer": layer, "row": args.row, "scales": scales, "offset": args.offset,
           "requests": records}
    atomic_write_text(out / "result.json", json.dumps(res, indent=1))
    print(f"wrote {out / 'result.json'}")


if __name__ == "__main__":
    main()
