"""``mobiedit export`` / ``run`` / ``bench-export`` / ``bench-bundle-sequential`` / ``bundle-undo`` and
the ``edit --bundle`` handler.

:func:`register` adds the subcommands to the main CLI's subparsers; heavy imports happen inside
the handlers, so registering costs nothing when the export extra is unused.
"""
from __future__ import annotations

import argparse
import logging

from mobiedit.resolve import add_model_args

log = logging.getLogger(__name__)


def register(subparsers) -> None:
    """Add ``export``, ``run``, ``bench-export``, ``bench-bundle-sequential`` and ``bundle-undo`` to
    ``subparsers`` (an argparse subparsers action)."""
    sp = subparsers.add_parser("export", help="export a model to a phone bundle (ExecuTorch or ONNX Runtime)")
    add_model_args(sp)
    sp.add_argument("--out", required=True, help="bundle folder to write (replaced atomically)")
    sp.add_argument("--overwrite", action="store_true",
                    help="replace a non-empty --out folder that is not a previous `mobiedit export` output")
    sp.add_argument("--runtime", choices=("executorch", "onnxruntime"), default="executorch",
                    help="the phone runtime the programs are for")
    # every config flag defaults to None: only the flags given are merged over default_export_config
    sp.add_argument("--quant", help="fp32 | 8da8w | 8da4w (executorch) | qdq_a16w8 (onnxruntime); "
                                    "default 8da8w for executorch, qdq_a16w8 for onnxruntime")
    sp.add_argument("--edit-quant", help="auto | delta | w8 | fp32 | same | nbits (edit program; default auto; nbits: "
                                         "onnxruntime MatMulNBits, --nbits 4|8 bits in blocks of --group-size; "
                                         "see docs/export.md)")
    sp.add_argument("--layer", type=int, help="edit layer (default: the model profile's, mobiedit.json)")
    for flag, (section, key) in _INT_FLAGS.items():
        sp.add_argument(f"--{flag}", type=int, help=f"{section}.{key} (default {_default_of(section, key)})")
    sp.add_argument("--fit-requests", metavar="FILE",
                    help="request file (JSON) whose edits the edit programs must take: grows the --edit-* shapes")
    sp.add_argument("--fit-n", type=int, default=0, help="use the first N requests of --fit-requests (0 = all)")
    sp.add_argument("--quantize-lm-head", action="store_true", help="quantize the inference LM head too")
    sp.add_argument("--quantize-embedding", action="store_true", help="int8 token embedding")
    sp.add_argument("--no-mom2", action="store_true", help="ship C^-1 = I (no key statistics)")
    sp.add_argument("--no-lint", action="store_true", help="skip the NPU graph lint")
    sp.add_argument("--seed", type=int, help="edit.seed: context templates' sampling seed (default 0)")
    sp.add_argument("--recipe", help="edit.recipe: the search the bundle's hosts run — fzoo (default, the "
                                     "shipped one) | fzoo-lr2 (Adam lr 2: about half the evaluations, a little "
                                     "less generalization; docs/results.md) | fzoo-grad (coordinate "
                                     "directions, steps sized by the whole gradient; docs/zo_spec.md §2)")
    sp.add_argument("--update-rule", choices=("rome", "rows", "protect", "rows-protect"),
                    help="edit.update_rule: the write every host computes — protect (default: C^-1 k̄ with the "
                         "active journal edits' keys held still) | rome (C^-1 k̄) | rows (exact at every "
                         "rewrite row's key) | rows-protect (rows, keys held still); docs/bundle_format.md")
    sp.set_defaults(fn=cmd_export)

    sp = subparsers.add_parser("run", help="generate from a bundle alone (active journal edits applied)")
    sp.add_argument("bundle", help="the bundle folder (`mobiedit export --out`)")
    sp.add_argument("--prompt", required=True, help="the text to continue (a question for a chat bundle)")
    sp.add_argument("--max-new-tokens", type=int, default=32, help="tokens to generate")
    sp.add_argument("--chat", action=argparse.BooleanOptionalAction, default=None,
                    help="prompt through the bundle's chat template as a user turn (default: the bundle's "
                         "manifest chat.default, i.e. the model profile's chat_template)")
    sp.set_defaults(fn=cmd_run)

    sp = subparsers.add_parser("bench-export", help="bundle size vs fp32 safetensors and decode tokens/s vs eager "
                                                    "fp32 HF, measured in one run (exports first unless --bundle)")
    from .bench_flags import bench_arguments

    bench_arguments(sp)
    sp.set_defaults(fn=cmd_bench_export)

    sp = subparsers.add_parser("bench-bundle-sequential",
                               help="edit a copy of a bundle N times through `edit --bundle` and score it through its "
                                    "own programs at checkpoints (retention, locality, undo; JSON + PNG)")
    from .bench_sequential import add_arguments as bench_sequential_arguments

    bench_sequential_arguments(sp)
    sp.set_defaults(fn=cmd_bench_bundle_sequential)

    sp = subparsers.add_parser("bundle-undo", help="undo one journaled edit of a bundle (same as `mobiedit undo`)")
    sp.add_argument("bundle", help="the bundle folder")
    sp.add_argument("edit_id", type=int, help="the journal entry to undo (as `edit --bundle` printed it)")
    sp.set_defaults(fn=cmd_undo)


_INT_FLAGS = {  # flag -> (ExportConfig section, field)
    "max-seq-len": ("inference", "max_seq_len"), "prefill-chunk": ("inference", "prefill_chunk"),
    "slots": ("inference", "slots"), "edit-k": ("edit_shapes", "K"), "edit-rows": ("edit_shapes", "rows"),
    "edit-suffix": ("edit_shapes", "suffix"), "edit-prefix": ("edit_shapes", "prefix"),
    "edit-targets": ("edit_shapes", "targets"), "edit-kl": ("edit_shapes", "kl"),
    "stats-limit": ("edit", "stats_limit"), "nbits": ("quant", "nbits"), "nbits-head": ("quant", "nbits_head"),
    "group-size": ("quant", "group_size"),
}


def _default_of(section: str, key: str):
    from .config import default_export_config

    return getattr(getattr(default_export_config(), section), key)


def config_from_args(args: argparse.Namespace, model_dir=None):
    """The :class:`~mobiedit.export.config.ExportConfig` of ``mobiedit export``'s flags: the flags
    given, merged over :func:`~mobiedit.export.config.default_export_config` of ``--runtime`` with
    the model profile's objective and context settings (:func:`mobiedit.profile.profile_settings`)
    as the edit section's."""
    from mobiedit.config_io import merge
    from mobiedit.profile import with_profile

    from .config import default_export_config

    over: dict = {}

    def put(section: str, key: str, value) -> None:
        if value is not None:
            over.setdefault(section, {})[key] = value

    for flag, (section, key) in _INT_FLAGS.items():
        put(section, key, getattr(args, flag.replace("-", "_")))
    put("quant", "scheme", args.quant)
    put("quant", "edit_scheme", args.edit_quant)
    put("quant", "quantize_lm_head", args.quantize_lm_head or None)
    put("quant", "quantize_embedding", args.quantize_embedding or None)
    put("lower", "lint", False if args.no_lint else None)
    put("edit", "layer", args.layer)
    put("edit", "seed", args.seed)
    put("edit", "recipe", getattr(args, "recipe", None))
    put("edit", "update_rule", getattr(args, "update_rule", None))
    put("edit", "mom2", False if args.no_mom2 else None)
    return merge(with_profile(default_export_config(args.runtime), model_dir, "edit", method="mobiedit"), over)


def cmd_export(args) -> int:
    import json

    import torch

    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.resolve import resolve_model

    from .bundle import export_bundle, load_bundle

    torch.set_num_threads(1)
    config_from_args(args)  # a bad flag fails before the model is resolved (maybe trained)
    model_dir = resolve_model_arg(args.model) if args.model else resolve_model(args)
    cfg = config_from_args(args, model_dir)
    fit = None
    if args.fit_requests:
        from mobiedit.requests import load_requests

        fit = load_requests(args.fit_requests)[: args.fit_n or None]
    out = export_bundle(model_dir, args.out, cfg, fit_requests=fit, overwrite=args.overwrite,
                        inputs=(args.fit_requests,), progress=not getattr(args, "quiet", False))
    m = load_bundle(out).manifest
    size = sum(f["bytes"] for f in m["files"].values())
    print(f"wrote {out} ({m['runtime']}, {m['quantization']} / edit {m['edit_quantization']}, {size / 1e6:.1f} MB)")
    if "edit_correlation" in m["checks"]:
        print("edit program loss correlation with fp32:", json.dumps(m["checks"]["edit_correlation"]))
    chat = m.get("chat")
    from .bundle import Stages

    secs = m["checks"].get("stage_seconds", {})
    stages = ", ".join(f"{k} {secs[k]} s" for k in Stages.NAMES if k in secs)
    print(f"export {m['checks']['export_seconds']} s ({stages}); chat template: "
          + (f"{chat['template_file']} (run default: {'chat' if chat['default'] else 'plain'})" if chat else "none"))
    return 0


def cmd_run(args) -> int:
    import torch

    from .ops import run_bundle

    from mobiedit.errors import ConfigError
    from mobiedit.termsafe import term_safe

    if not 1 <= args.max_new_tokens <= 1 << 16:
        raise ConfigError(f"--max-new-tokens is {args.max_new_tokens}", where="--max-new-tokens",
                          fix="generate at least 1 token (and at most the bundle's max_seq_len), e.g. 32")
    torch.set_num_threads(1)
    print(term_safe(run_bundle(args.bundle, args.prompt, args.max_new_tokens, chat=args.chat), keep_newlines=True))
    return 0


def cmd_bench_export(args) -> int:
    import json

    from .bench import run

    f = run(args)
    print(f"bundle {f['bundle']}: {f['bundle_bytes'] / 1e6:.1f} MB = {f['size_ratio']} x the fp32 safetensors "
          f"({f['fp32_safetensors_bytes'] / 1e6:.1f} MB; programs alone {f['size_ratio_programs_only']} x)")
    print(f"decode: bundle {f['decode_tokens_per_s_bundle']} tokens/s, eager fp32 {f['decode_tokens_per_s_eager_fp32']} "
          f"tokens/s -> {f['speedup']} x; generate (prefill + {f['decode_tokens']} tokens): bundle "
          f"{f['generate_tokens_per_s_bundle']}, HF generate {f['generate_tokens_per_s_eager_fp32']} tokens/s -> "
          f"{f['generate_speedup']} x")
    print(f"wrote {args.out}/bench.json")
    log.debug("bench figures: %s", json.dumps(f))
    return 0


def cmd_bench_bundle_sequential(args) -> int:
    """Run :mod:`.bench_sequential` on a copy of ``--bundle``; print the table; 1 when undoing
    every edit did not restore the unedited bundle."""
    import torch

    from .bench_sequential import RESULT_JSON, format_table, run, settings_from_args

    torch.set_num_threads(1)
    s = settings_from_args(args)
    result = run(s, progress=not getattr(args, "quiet", False))
    print(format_table(result))
    if s.out is not None:
        print(f"wrote {s.out / RESULT_JSON} and its .png")
    return 0 if result["undo"]["restores_unedited"] else 1


def cmd_undo(args) -> int:
    from .ops import undo_bundle_edit

    from mobiedit.termsafe import term_safe

    entry = undo_bundle_edit(args.bundle, args.edit_id)
    print(f"undid edit {entry.id} ({term_safe(entry.request.get('case_id'))}) in {term_safe(args.bundle)}")
    return 0


def _ladder_note(entry) -> str:
    """`` clamp=F (rung i)`` for a journal entry written by the clamp ladder, else ``""``."""
    cfg = (entry.config or {}) if entry is not None else {}
    if "clamp_norm_factor" not in cfg:
        return ""
    return f" clamp={cfg['clamp_norm_factor']:g} (rung {cfg.get('ladder_tries', 1)})"


def bundle_edit(args) -> int:
    """``mobiedit edit --bundle BUNDLE --requests FILE``: edit through the bundle's programs with
    the bundle's recipe (manifest ``recipe``; ``--seed`` replaces its seed). Exit code 1 when an
    edit missed its success criterion (it is applied only with --force)."""
    import dataclasses

    import torch

    from mobiedit.resolve import load_cli_requests

    from .bundle import load_bundle
    from .ops import edit_bundle
    from .recipe import recipe_of

    torch.set_num_threads(1)
    reqs = load_cli_requests(args)
    bundle = load_bundle(args.bundle)
    recipe = recipe_of(bundle.manifest)
    seed = getattr(args, "seed", None)
    zo = recipe.zo if seed is None else dataclasses.replace(recipe.zo, seed=seed)
    results = edit_bundle(bundle, reqs, zo, success_fraction=recipe.success_fraction,
                          success_nll=recipe.success_nll, force=getattr(args, "force", False),
                          repair=getattr(args, "repair", False), stop_on=getattr(args, "stop_on", None))
    from mobiedit.termsafe import term_safe

    for r in results:
        print(f"{term_safe(r.request.case_id)}: {r.status} applied={r.applied} loss_evals={r.loss_evals} wall={r.wall_time:.2f}s"
              + (f" edit_id={r.entry.id}" if r.entry else "") + _ladder_note(r.entry)
              + (f" (repairs edit {r.repair_of})" if r.repair_of is not None else ""))
    asked = [r for r in results if r.repair_of is None]
    failed = [r for r in asked if not r.applied]
    repairs = [r for r in results if r.repair_of is not None]
    print(f"journal {bundle.path / 'journal'}: {len(asked) - len(failed)} edit(s) applied"
          + (f", {len(failed)} missed the success criterion (--force applies them)" if failed else "")
          + (f", {sum(r.applied for r in repairs)} of {len(repairs)} lost earlier edit(s) repaired" if repairs else ""))
    return 1 if failed else 0
