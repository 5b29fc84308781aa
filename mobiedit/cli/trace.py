"""``mobiedit trace``: causal trace (ROME-style) of a model on requests."""
from __future__ import annotations

import argparse
import logging
import math
from pathlib import Path

from ..errors import ConfigError
from ._common import Command, model_args

log = logging.getLogger("mobiedit")


def add_trace(sp: argparse.ArgumentParser) -> None:
    model_args(sp, preset=False)
    sp.add_argument("--requests", help="request file (default: the model profile's `requests`, the facts it knows; else bundled CounterFact 1k)")
    sp.add_argument("--write-profile", action="store_true",
                    help="record the chosen layer (and why) in the model's mobiedit.json; with --requests, "
                         "also those requests (copied into the folder as known-requests.json), the default "
                         "request file of bench, sequential and tune")
    sp.add_argument("--n", type=int, default=40, help="trace the first N requests")
    sp.add_argument("--noise", type=float, default=3.0, help="subject noise std, in units of the embedding std")
    sp.add_argument("--window", type=int, help="layers restored together for the MLP/attention rows "
                    "(default: ROME's 10, or a third of the depth on shallower models)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the corruption noise")
    sp.add_argument("--out", default="runs/trace", help="folder for trace.json and trace.png")


def _check_flags(args: argparse.Namespace) -> Path:
    if args.n < 1:
        raise ConfigError(f"--n is {args.n}", where="--n", fix="trace at least one request, e.g. --n 40")
    if not (math.isfinite(args.noise) and args.noise > 0):
        raise ConfigError(f"--noise is {args.noise}", where="--noise",
                          fix="pass a positive multiple of the embedding std, e.g. 3.0 (ROME's value)")
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        raise ConfigError("output path exists and is not a folder", where=f"--out {out}",
                          fix="pass a folder (trace.json and trace.png are written into it)")
    return out


def cmd_trace(args: argparse.Namespace) -> int:
    """Causal trace of a model on requests: table on stdout, trace.json + trace.png in --out."""
    out = _check_flags(args)
    import torch

    from ..api import load_model
    from ..causal_trace import KNOWN_P_MIN, choose_layer, knows_facts, trace_requests
    from ..causal_trace_report import format_table, write_outputs
    from ..requests import load_requests
    from ..resolve import request_file, resolve_model
    from ..session import check_fits

    torch.set_num_threads(1)
    model_dir = resolve_model(args)
    lm = load_model(model_dir)
    req_file = request_file(args.requests, model_dir)
    reqs = load_requests(req_file)[: args.n]
    if len(reqs) < args.n:
        log.warning("%s holds %d requests; tracing all of them (--n %d)", req_file, len(reqs), args.n)
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
        _write_profile(args, lm, result, layer, f"{reason} (requests {req_file.name}, seed {args.seed})",
                       req_file if args.requests else None)
    return 0


#: where ``trace --write-profile --requests FILE`` keeps FILE inside the model folder
KNOWN_REQUESTS_FILE = "known-requests.json"


def _write_profile(args: argparse.Namespace, lm, result, layer: int, reason: str, known: Path | None) -> None:
    """Record the chosen layer in the model's profile; refused when the trace measured noise. With
    ``known`` (the ``--requests`` file the model was just shown to know), that file is copied into
    the folder and becomes the profile's ``requests``."""
    from dataclasses import replace

    from ..atomic import atomic_write_text
    from ..causal_trace import knows_facts
    from ..profile import ModelProfile, read_profile, write_profile

    if not knows_facts(result):
        raise ConfigError("not writing a profile from a trace of facts the model does not know",
                          where="--requests", fix="trace requests the model knows (`mobiedit requests known`)")
    old = read_profile(lm.path)
    prof = replace(old, edit_layer=layer, layer_reason=reason) if old else ModelProfile(
        edit_layer=layer, layer_reason=reason, chat_template=bool(getattr(lm.tokenizer, "chat_template", None)))
    if known is not None:
        dest = Path(lm.path) / KNOWN_REQUESTS_FILE
        if known.resolve() != dest.resolve():
            atomic_write_text(dest, known.read_text(encoding="utf-8"))
        prof = replace(prof, requests=f"file:{KNOWN_REQUESTS_FILE}")
        print(f"wrote {dest} (the profile's default requests)")
    print(f"wrote {write_profile(lm.path, prof)}")


TRACE = Command(add_trace, cmd_trace, "causal trace: which layer/state carries a fact (table, JSON + PNG)")
