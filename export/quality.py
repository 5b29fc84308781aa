"""Edit quality with the loop's forwards run through exported programs (the "NPU emulation"):
the same N requests edited (a) by the eager quantized MobiEdit path and (b) through each bundle's
prefix + edit programs in ExecuTorch / ONNX Runtime, every edit on the unedited model, scored
by the same evaluator on the float HF model (edit → score → restore).

Run: ``python -m mobiedit.export.quality --preset default --n 100 --out runs/export_quality``
(not a test: one core, hours at 100 requests). Each row appends one JSON line per finished request
to ``OUT/<row>.jsonl`` and a rerun resumes from there. Bundles are exported with ``mobiedit export``'s default
settings per runtime (8da8w + delta edit program for ExecuTorch, QDQ a16w8 for ONNX Runtime),
the edit shapes fitted to the N requests (``--fit-requests``), and kept in ``OUT/bundle-<runtime>``
for reuse while they still take every request. ``--bundle DIR`` (repeatable) adds rows for bundles
exported by hand (e.g. ``--edit-quant nbits``; export them with ``--fit-requests`` for the same
requests); ``--requests FILE --offset O`` picks the requests (default: the bundled CounterFact set).
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import torch
from tqdm import tqdm

from mobiedit.atomic import atomic_write_text
from mobiedit.errors import MobiEditError
from mobiedit.rowlog import RowLog
from mobiedit.resolve import add_model_args
from mobiedit.quiet import NOTICE

log = logging.getLogger(__name__)


def _fits(bundle_dir: Path, reqs) -> bool:
    """Whether every request's batch fits the bundle's edit shapes (False: no loadable bundle)."""
    from mobiedit.editing.config import ObjectiveConfig

    from .bundle import load_bundle
    from .verify import edit_shapes_of
    from .packing import fit_shapes, requests_needs

    try:
        b = load_bundle(bundle_dir)
    except MobiEditError:
        return False
    m = b.manifest
    objective = ObjectiveConfig(**m["edit"]["objective"])
    have = edit_shapes_of(m)
    return fit_shapes(have, requests_needs(b.tokenizer(), reqs, m["edit"]["templates"], objective)) == have


def export_default(model_dir: Path, runtime: str, out: Path, reqs) -> Path:
    """``mobiedit export --runtime RUNTIME`` with its default flags, the edit shapes fitted to
    ``reqs`` (reused when ``out`` loads and takes every request)."""
    from .bundle import export_bundle
    from .config import default_export_config

    if _fits(out, reqs):
        return out
    t0 = time.perf_counter()
    export_bundle(model_dir, out, default_export_config(runtime), fit_requests=reqs)
    log.log(NOTICE, "exported %s bundle in %.0f s", runtime, time.perf_counter() - t0)
    return out


def eager_config(model_dir, layer: int):
    """MobiEdit's default (FZOO, W8A16 eager graph, prefix reuse, early stop) with the model
    profile's settings for it — objective, context, success rule and its own search and forward
    (``methods.mobiedit``): the search its bundles ship, on the eager forward the profile names."""
    import dataclasses

    from mobiedit.methods.mobiedit import MobiEditConfig
    from mobiedit.profile import with_profile

    return with_profile(dataclasses.replace(MobiEditConfig(), layer=layer), model_dir, method="mobiedit")


def eager_row(lm, reqs, cfg, log_: RowLog) -> dict:
    """``cfg`` (:func:`eager_config`) on ``reqs``, each request on the unedited model; the row is
    named by its eager forward (``eager-w8a16``)."""
    from mobiedit.forward.quant import quantized_copy
    from mobiedit.session import edit_independent, prepare

    ctx = prepare(lm, cfg, seed=0)
    fwd = quantized_copy(lm.model, lm.family, cfg.layer, cfg.quant)  # once, not per request
    for req in tqdm([r for r in reqs if r.case_id not in log_.done], desc=f"edit eager {cfg.quant.scheme}"):
        rec = edit_independent(lm, [req], cfg, ctx, progress=False, fwd_model=fwd)[0]
        log_.add(req.case_id, rec.scores, succeeded=bool(rec.outcome.succeeded), loss_evals=rec.outcome.loss_evals,
                 wall_s=rec.outcome.wall_time)
    return log_.summary(f"eager-{cfg.quant.scheme}", [r.case_id for r in reqs])


def bundle_row(lm, reqs, bundle_dir: Path, log_: RowLog, name: str | None = None) -> dict:
    """Each request searched through the bundle's programs (empty journal), its factors applied
    to the float HF model's edit weight, scored, and the weight restored bit-exactly. A request an
    edit refuses (:func:`mobiedit.prompts.request_refusal`) is scored unedited, unsearched."""
    from mobiedit.evaluate import pre_edit_snapshot, score_request
    from mobiedit.families import get_module
    from mobiedit.prompts import request_refusal
    from mobiedit.editing.update import write_factors

    from .bundle import load_bundle
    from .ops import search_bundle_edit
    from .recipe import recipe_of

    b = load_bundle(bundle_dir)
    journal, keystats = b.journal(), b.keystats()
    recipe = recipe_of(b.manifest)  # the search and success rule the bundle ships
    weight = get_module(lm.model, lm.family.mlp_out, b.manifest["edit_layer"]).weight
    for req in tqdm([r for r in reqs if r.case_id not in log_.done], desc=f"edit via {b.runtime}"):
        pre = pre_edit_snapshot(lm.model, lm.tokenizer, req)
        if request_refusal(b.tokenizer(), req) is not None:  # as edit --bundle and the eager row: unsearched
            log_.add(req.case_id, score_request(lm.model, lm.tokenizer, req, pre), succeeded=False, loss_evals=0,
                     wall_s=0.0)
            continue
        t0 = time.perf_counter()
        found = search_bundle_edit(b, journal, keystats, req, recipe.zo, recipe.success_fraction, recipe.success_nll)
        wall = time.perf_counter() - t0
        saved = weight.detach().clone()
        write_factors(weight, torch.from_numpy(found.u), torch.from_numpy(found.w), lm.family.weight_out_in)
        scores = score_request(lm.model, lm.tokenizer, req, pre)
        with torch.no_grad():
            weight.copy_(saved)
        log_.add(req.case_id, scores, succeeded=bool(found.succeeded), loss_evals=found.loss_evals, wall_s=wall)
    return log_.summary(name or f"bundle-{b.runtime}", [r.case_id for r in reqs])


def format_rows(rows: list[dict]) -> str:
    lines = [f"{'row':<24}{'n':>5}{'eff':>7}{'gen':>7}{'loc':>7}{'succ%':>7}{'evals(med)':>11}{'s/edit':>8}"]
    for r in rows:
        q, med = r["quality"], r["loss_evals_median_success"]
        lines.append(f"{r['row']:<24}{r['n']:>5}{q['efficacy_acc']:>7.1f}{q['generalization_acc']:>7.1f}"
                     f"{q['locality_acc']:>7.1f}{r['success_rate']:>7.1f}{(med or float('nan')):>11.0f}"
                     f"{r['wall_per_edit_s']:>8.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from mobiedit.quiet import cli_logging, quiet_libraries
    from mobiedit.resolve import edit_layer_for, resolve_model
    from mobiedit.models import load_model
    from mobiedit.requests import bundled_path, load_requests

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_args(p)
    p.add_argument("--n", type=int, default=100)
    p.add_argument("--runtimes", default="executorch,onnxruntime",
                   help="runtimes whose default bundles are exported and scored ('' for none)")
    p.add_argument("--bundle", action="append", default=[], help="an exported bundle to score too (repeatable)")
    p.add_argument("--requests", help="request file (default: the bundled CounterFact set)")
    p.add_argument("--offset", type=int, default=0, help="skip the first requests of the file")
    p.add_argument("--no-eager", action="store_true", help="skip the eager quantized row")
    p.add_argument("--out", default="runs/export_quality")
    p.add_argument("--quiet", action="store_true", help="no training progress bar")
    args = p.parse_args(argv)
    cli_logging()
    quiet_libraries()
    torch.set_num_threads(1)
    try:
        model_dir = resolve_model(args)
        layer = edit_layer_for(model_dir, None)
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        lm = load_model(model_dir)
        reqs = load_requests(args.requests or bundled_path("counterfact-edit-1k.json"))[args.offset:args.offset + args.n]
        cfg = eager_config(model_dir, layer)
        rows = [] if args.no_eager else [eager_row(lm, reqs, cfg, RowLog(out / f"eager-{cfg.quant.scheme}.jsonl"))]
        for rt in (x for x in args.runtimes.split(",") if x):
            bundle = export_default(model_dir, rt, out / f"bundle-{rt}", reqs)
            rows.append(bundle_row(lm, reqs, bundle, RowLog(out / f"bundle-{rt}.jsonl")))
            print(format_rows(rows[-1:]).splitlines()[-1], flush=True)
        for given in map(Path, args.bundle):
            rows.append(bundle_row(lm, reqs, given, RowLog(out / f"bundle-{given.name}.jsonl"), f"bundle {given.name}"))
            print(format_rows(rows[-1:]).splitlines()[-1], flush=True)
    except MobiEditError as e:
        print(f"mobiedit.export.quality: error: {e}")
        return 2
    atomic_write_text(out / "quality.json" if args.n == 100 else out / f"quality-n{args.n}.json", json.dumps({"model": str(model_dir), "layer": layer, "rows": rows}, indent=1))
    print(format_rows(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
