"""``mobiedit export`` / ``mobiedit run`` / ``mobiedit bundle-undo`` and the ``edit --bundle`` handler.

:func:`register` adds the subcommands to the main CLI's subparsers; heavy imports happen inside
the handlers, so registering costs nothing when the export extra is unused.
"""
from __future__ import annotations

import argparse
import logging

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    """Add ``export``, ``run`` and ``bundle-undo`` to ``subparsers`` (an argparse subparsers action)."""
    sp = subparsers.add_parser("export", help="export a model to a phone bundle (ExecuTorch or ONNX Runtime)")
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--model", help="local Hugging Face model folder")
    g.add_argument("--preset", default="default", help="fact LM preset when --model is absent")
    sp.add_argument("--out", required=True, help="bundle folder to write (replaced atomically)")
    sp.add_argument("--runtime", choices=("executorch", "onnxruntime"), default="executorch")
    sp.add_argument("--quant", default=None,
                    help="fp32 | 8da8w | 8da4w (executorch) | qdq_a16w8 (onnxruntime); "
                         "default 8da8w for executorch, qdq_a16w8 for onnxruntime")
    sp.add_argument("--edit-quant", default="auto", help="auto | delta | w8 | fp32 | same (edit program; see docs/export.md)")
    sp.add_argument("--layer", type=int, help="edit layer (default: the fact LM's)")
    sp.add_argument("--max-seq-len", type=int, default=128)
    sp.add_argument("--prefill-chunk", type=int, default=16)
    sp.add_argument("--slots", type=int, default=8)
    for name, default in (("k", 17), ("rows", 22), ("suffix", 16), ("prefix", 32), ("targets", 128), ("kl", 1)):
        sp.add_argument(f"--edit-{name}", type=int, default=default)
    sp.add_argument("--fit-requests", metavar="FILE",
                    help="request file (JSON) whose edits the edit programs must take: grows the --edit-* shapes")
    sp.add_argument("--fit-n", type=int, default=0, help="use the first N requests of --fit-requests (0 = all)")
    sp.add_argument("--quantize-lm-head", action="store_true", help="quantize the inference LM head too")
    sp.add_argument("--quantize-embedding", action="store_true", help="int8 token embedding")
    sp.add_argument("--no-mom2", action="store_true", help="ship C^-1 = I (no key statistics)")
    sp.add_argument("--stats-limit", type=int, default=0, help="texts of the statistics corpus to use (0 = all)")
    sp.add_argument("--no-lint", action="store_true", help="skip the NPU graph lint")
    sp.add_argument("--seed", type=int, default=0)
    sp.set_defaults(fn=cmd_export)

    sp = subparsers.add_parser("run", help="generate from a bundle alone (active journal edits applied)")
    sp.add_argument("bundle")
    sp.add_argument("--prompt", required=True)
    sp.add_argument("--max-new-tokens", type=int, default=32)
    sp.set_defaults(fn=cmd_run)

    sp = subparsers.add_parser("bundle-undo", help="undo one journaled edit of a bundle")
    sp.add_argument("bundle")
    sp.add_argument("edit_id", type=int)
    sp.set_defaults(fn=cmd_undo)


def config_from_args(args: argparse.Namespace):
    """The :class:`~mobiedit.export.config.ExportConfig` of ``mobiedit export``'s flags."""
    from .config import EditSetup, EditShapes, ExportConfig, InferenceShapes, LowerConfig, QuantizeConfig

    quant = args.quant or ("8da8w" if args.runtime == "executorch" else "qdq_a16w8")
    return ExportConfig(
        inference=InferenceShapes(max_seq_len=args.max_seq_len, prefill_chunk=args.prefill_chunk, slots=args.slots),
        edit_shapes=EditShapes(K=args.edit_k, rows=args.edit_rows, suffix=args.edit_suffix, prefix=args.edit_prefix,
                               targets=args.edit_targets, kl=args.edit_kl),
        quant=QuantizeConfig(scheme=quant, edit_scheme=args.edit_quant, quantize_lm_head=args.quantize_lm_head,
                             quantize_embedding=args.quantize_embedding),
        lower=LowerConfig(runtime=args.runtime, lint=not args.no_lint),
        edit=EditSetup(layer=args.layer, seed=args.seed, mom2=not args.no_mom2, stats_limit=args.stats_limit))


def cmd_export(args) -> int:
    import json

    import torch

    from mobiedit.cli import resolve_model

    from .bundle import export_bundle, load_bundle

    torch.set_num_threads(1)
    cfg = config_from_args(args)
    fit = None
    if args.fit_requests:
        from mobiedit.requests import load_requests

        fit = load_requests(args.fit_requests)[: args.fit_n or None]
    out = export_bundle(resolve_model(args), args.out, cfg, fit_requests=fit)
    m = load_bundle(out).manifest
    size = sum(f["bytes"] for f in m["files"].values())
    print(f"wrote {out} ({m['runtime']}, {m['quantization']} / edit {m['edit_quantization']}, {size / 1e6:.1f} MB)")
    if "edit_correlation" in m["checks"]:
        print("edit program loss correlation with fp32:", json.dumps(m["checks"]["edit_correlation"]))
    return 0


def cmd_run(args) -> int:
    import torch

    from .ops import run_bundle

    torch.set_num_threads(1)
    print(run_bundle(args.bundle, args.prompt, args.max_new_tokens))
    return 0


def cmd_undo(args) -> int:
    from .ops import undo_bundle_edit

    entry = undo_bundle_edit(args.bundle, args.edit_id)
    print(f"undid edit {entry.id} ({entry.request.get('case_id')}) in {args.bundle}")
    return 0


def bundle_edit(args) -> int:
    """``mobiedit edit --bundle BUNDLE --requests FILE``: edit through the bundle's programs.
    Exit code 1 when an edit missed its success criterion (it is applied only with --force)."""
    import dataclasses

    import torch

    from mobiedit.cli import load_cli_requests

    from .bundle import load_bundle
    from .ops import default_zo, edit_bundle

    torch.set_num_threads(1)
    bundle = load_bundle(args.bundle)
    reqs = load_cli_requests(args)
    zo = dataclasses.replace(default_zo(bundle.manifest["shapes"]["edit_K"]), seed=getattr(args, "seed", 0))
    results = edit_bundle(bundle, reqs, zo, force=getattr(args, "force", False))
    for r in results:
        print(f"{r.request.case_id}: {r.status} applied={r.applied} loss_evals={r.loss_evals} wall={r.wall_time:.2f}s"
              + (f" edit_id={r.entry.id}" if r.entry else ""))
    failed = [r for r in results if not r.applied]
    print(f"journal {bundle.path / 'journal'}: {len(results) - len(failed)} edit(s) applied"
          + (f", {len(failed)} missed the success criterion (--force applies them)" if failed else ""))
    return 1 if failed else 0
