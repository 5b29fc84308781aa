"""Sequential editing: many edits applied one after another with the journal; retention of the
earlier edits, locality drift, and bit-exact undo (docs/reliability.md, "Sequential editing").

:func:`run_sequential` edits the first ``n_edits`` requests in order on one model (each edit
sees the model left by the previous ones, exactly as ``mobiedit edit`` does), journaling every
applied edit. At each checkpoint it scores, with :mod:`mobiedit.evaluate`,

* every request edited so far (efficacy / generalization / locality; locality compares each
  neighbour prompt's argmax tokens with the *unedited* model's);
* a fixed probe of ``probe`` further requests that are never edited (locality vs the unedited
  model, and the token accuracy of their true answers): the drift of unrelated knowledge;
* the relative Frobenius drift of the edited weight.

Then it undoes ``n_undo`` randomly chosen edits one by one through :meth:`Journal.undo` and
checks after each that the edited module equals, bit for bit, the weight rebuilt independently
of the journal — the pre-edit weight snapshot plus the in-memory factors of the remaining edits
in id order — and that every other parameter still equals the unedited model; finally it undoes
the rest and checks that the whole model equals the unedited one bit for bit.

    python -m mobiedit.sequential --preset default --n 100 --method rome --out runs/seq.json
"""
from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Sequence

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINTS = (1, 10, 50, 100)
COLUMNS = (("edits", "edits", 6, "d"), ("applied", "applied", 8, "d"),
           ("efficacy_acc", "eff acc", 8, ".1f"), ("efficacy_prob", "eff prob", 9, ".1f"),
           ("retention_applied_acc", "ret acc*", 9, ".1f"), ("generalization_acc", "gen acc", 8, ".1f"),
           ("locality_acc", "loc acc", 8, ".1f"), ("probe_locality_acc", "probe loc", 10, ".1f"),
           ("probe_true_acc", "probe true", 11, ".1f"), ("weight_drift", "dW/W", 8, ".4f"))


def _probe_true_acc(model, tok, reqs) -> float:
    """Token accuracy (%) of the true answers of ``reqs`` on their rewrite prompts."""
    from .evaluate import teacher_forced, token_acc

    pairs = [(r.rewrite_prompt, r.target_true) for r in reqs if r.target_true]
    if not pairs:
        return float("nan")
    acc = token_acc(teacher_forced(model, tok, [p for p, _ in pairs], [t for _, t in pairs]))
    return 100.0 * sum(acc) / len(acc)


def run_sequential(model_dir: str | Path, n_edits: int, method: str = "rome", layer: int | None = None,
                   checkpoints: Sequence[int] = DEFAULT_CHECKPOINTS, *, requests: str | Path | None = None,
                   seed: int = 0, force: bool = False, n_undo: int = 10, probe: int = 20,
                   work: str | Path | None = None, progress: bool = False, config: str | None = None) -> dict:
    """Edit ``n_edits`` requests sequentially and return the table and the undo check (see the
    module docstring). ``force`` applies edits that missed their success criterion (``--force``).
    Checkpoints above ``n_edits`` are dropped; ``n_edits`` itself is always one."""
    import torch

    from .resolve import edit_layer_for, method_config
    from .errors import ConfigError
    from .evaluate import aggregate, pre_edit_snapshot, score_request
    from .families import get_module
    from .journal import Journal, apply_factors
    from .models import load_model
    from .requests import bundled_path, load_requests
    from .session import edit_sequential, prepare, sequential_config

    torch.set_num_threads(1)
    t0 = time.perf_counter()
    if n_edits < 1:
        raise ConfigError(f"must be >= 1, got {n_edits}", where="--n", fix="edit at least one request")
    model_dir = Path(model_dir)
    layer = edit_layer_for(model_dir, layer)
    cfg = sequential_config(method_config(method, layer, config, seed, model_dir), n_edits)
    lm = load_model(model_dir)
    tok, fam = lm.tokenizer, lm.family
    all_reqs = load_requests(requests or bundled_path("counterfact-edit-1k.json"))
    if len(all_reqs) < n_edits:
        raise ConfigError(f"only {len(all_reqs)} requests for {n_edits} edits", where="--n",
                          fix="pass fewer edits or a larger --requests file")
    edits, probes = all_reqs[:n_edits], all_reqs[n_edits:n_edits + probe]
    marks = sorted({c for c in checkpoints if 1 <= c <= n_edits} | {n_edits})

    pre = {r.case_id: pre_edit_snapshot(lm.model, tok, r) for r in edits + probes}
    base_params = {k: v.detach().clone() for k, v in lm.model.named_parameters()}
    weight = get_module(lm.model, fam.mlp_out, layer).weight
    module = fam.mlp_out.format(layer)
    w0 = weight.detach().clone()
    probe_true_base = _probe_true_acc(lm.model, tok, probes)
    ctx = prepare(lm, cfg, seed, progress=progress)

    tmp = None if work else tempfile.TemporaryDirectory(prefix="mobiedit-seq-")
    journal = Journal.open(Path(work or tmp.name) / "journal")
    factors: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    applied_reqs: list = []
    rows: list[dict] = []
    try:
        for i, req in enumerate(edits, 1):
            rec = edit_sequential(lm, [req], cfg, ctx, journal, force=force, progress=False)[0]
            if rec.applied:
                entry = journal.entries()[-1]
                factors[entry.id] = (rec.outcome.u.detach().clone(), rec.outcome.w.detach().clone())
                applied_reqs.append(req)
            if progress:
                print(f"edit {i}/{n_edits} {req.case_id}: {rec.outcome.status} applied={rec.applied}",
                      file=sys.stderr, flush=True)
            if i in marks:
                scores = [score_request(lm.model, tok, r, pre[r.case_id]) for r in edits[:i]]
                agg = aggregate(scores)
                kept = [s for s, r in zip(scores, edits[:i]) if r in applied_reqs]
                probe_scores = [score_request(lm.model, tok, r, pre[r.case_id]) for r in probes]
                rows.append({
                    "edits": i, "applied": len(applied_reqs),
                    "efficacy_acc": agg["efficacy_acc"], "efficacy_prob": agg["efficacy_prob"],
                    "retention_applied_acc": aggregate(kept)["efficacy_acc"] if kept else float("nan"),
                    "generalization_acc": agg["generalization_acc"], "locality_acc": agg["locality_acc"],
                    "probe_locality_acc": aggregate(probe_scores)["locality_acc"] if probes else float("nan"),
                    "probe_true_acc": _probe_true_acc(lm.model, tok, probes),
                    "weight_drift": float((weight.detach() - w0).float().norm() / w0.float().norm()),
                })
                log.info("checkpoint %s", rows[-1])
        undo = _undo_check(lm.model, fam, journal, module, w0, base_params, factors, n_undo, seed,
                           apply_factors)
    finally:
        if tmp is not None:
            tmp.cleanup()
    from .config_io import to_dict

    return {"model": str(model_dir), "method": method, "config": to_dict(cfg), "layer": layer, "n_edits": n_edits,
            "force": force,
            "seed": seed, "probe_requests": len(probes), "probe_true_acc_unedited": probe_true_base,
            "table": rows, "undo": undo, "wall_seconds": time.perf_counter() - t0}


def _undo_check(model, fam, journal, module: str, w0, base_params: dict, factors: dict, n_undo: int,
                seed: int, apply_factors) -> dict:
    """Undo random edits one by one, then all; compare against an independent rebuild."""
    import torch

    rng = random.Random(seed)
    active = [e.id for e in journal.entries(active_only=True)]
    order = rng.sample(active, min(n_undo, len(active)))
    weight = model.get_submodule(module).weight
    exact, others_ok, checks = 0, True, []

    def expected() -> torch.Tensor:
        w = w0.clone()
        for e in journal.entries(active_only=True):
            u, v = factors[e.id]
            w = apply_factors(w, u, v, fam.weight_out_in)
        return w

    def others_untouched() -> bool:
        return all(torch.equal(p, base_params[k]) for k, p in model.named_parameters()
                   if k != module + ".weight")

    for edit_id in order:
        journal.undo(edit_id, model, fam)
        ok = torch.equal(weight.detach(), expected())
        exact += int(ok)
        others_ok &= others_untouched()
        checks.append({"undone": edit_id, "bit_exact": ok})
    for e in journal.entries(active_only=True):
        journal.undo(e.id, model, fam)
    restored = torch.equal(weight.detach(), w0) and others_untouched()
    return {"random_undos": len(order), "bit_exact": exact, "other_params_untouched": others_ok,
            "undo_all_restores_unedited_model": restored, "checks": checks}


def format_table(result: dict) -> str:
    head = "".join(f"{label:>{width}}" for _, label, width, _ in COLUMNS)
    lines = [f"sequential {result['method']} edits on {result['model']} (layer {result['layer']}, "
             f"force={result['force']}; probe: {result['probe_requests']} unedited facts, true-answer acc "
             f"before editing {result['probe_true_acc_unedited']:.1f})", head]
    for row in result["table"]:
        lines.append("".join(f"{row[key]:>{width}{spec}}" for key, _, width, spec in COLUMNS))
    u = result["undo"]
    lines.append("* ret acc: efficacy of the applied edits only; loc acc: neighbours of the edited facts; "
                 "probe loc/true: never-edited facts (percent; dW/W: relative weight drift)")
    lines.append(f"undo: {u['bit_exact']}/{u['random_undos']} random undos bit-exact against an independent "
                 f"rebuild; other parameters untouched: {u['other_params_untouched']}; undoing every edit "
                 f"restores the unedited model bit for bit: {u['undo_all_restores_unedited_model']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from .quiet import quiet_libraries
    from .errors import MobiEditError

    p = argparse.ArgumentParser(prog="python -m mobiedit.sequential",
                                description=__doc__.split("\n")[0])
    g = p.add_mutually_exclusive_group()
    g.add_argument("--model", help="local HF folder or checkpoint name")
    g.add_argument("--preset", default="default", help="fact LM preset when --model is absent")
    p.add_argument("--n", type=int, default=100, help="number of sequential edits")
    p.add_argument("--method", choices=("rome", "mobiedit"), default="rome")
    p.add_argument("--config", help="YAML method config merged over the method's defaults "
                                    "(e.g. `update: {rule: nullspace}` for null-space-projected updates)")
    p.add_argument("--layer", type=int)
    p.add_argument("--checkpoints", type=int, nargs="*", default=list(DEFAULT_CHECKPOINTS))
    p.add_argument("--requests", help="request file (default: bundled CounterFact 1k)")
    p.add_argument("--force", action="store_true", help="apply edits that missed their success criterion")
    p.add_argument("--undo", type=int, default=10, help="random undos to check")
    p.add_argument("--probe", type=int, default=20, help="never-edited requests for the drift probe")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", help="write the result as JSON here")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    quiet_libraries()
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        if args.model:
            from .checkpoints import resolve_model_arg

            model_dir = resolve_model_arg(args.model)
        else:
            from .factlm import ensure_fact_lm

            model_dir = ensure_fact_lm(args.preset, progress=not args.quiet)
        res = run_sequential(model_dir, args.n, args.method, args.layer, args.checkpoints,
                             requests=args.requests, seed=args.seed, force=args.force, n_undo=args.undo,
                             probe=args.probe, progress=not args.quiet, config=args.config)
    except MobiEditError as e:
        print(f"mobiedit: error: {e}", file=sys.stderr)
        return 2
    print(format_table(res))
    if args.out:
        from .atomic import atomic_write_text

        atomic_write_text(args.out, json.dumps(res, indent=1))
    u = res["undo"]
    return 0 if u["bit_exact"] == u["random_undos"] and u["undo_all_restores_unedited_model"] else 1


if __name__ == "__main__":
    sys.exit(main())
