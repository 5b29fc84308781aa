"""``mobiedit sequential``: sequential editing as a bench — several rows (method configurations),
each a run of many edits applied one after another from the same unedited model over the same
requests; retention of the earlier edits, locality drift, held-out perplexity, per-edit
interference and bit-exact undo (docs/reliability.md, "Sequential editing"). JSON + PNG.

    mobiedit sequential --preset default --n 50 --rows rome-plain,rome,mobiedit --out runs/seq
    python -m mobiedit.sequential ...   (the same arguments, plus --quiet)

The rows are :mod:`mobiedit.sequential_rows`; one row's run is :mod:`mobiedit.sequential_run`; the
tables and the result file :mod:`mobiedit.sequential_report`; the figure :mod:`mobiedit.sequential_plot`.
Rows run one after another in this process (one torch thread). The exit code is 1 when a row's
undo check is not bit-exact.
"""
from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Sequence

from .resolve import add_model_args

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINTS = (1, 10, 50, 100)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``mobiedit sequential`` and ``python -m mobiedit.sequential``."""
    from .sequential_rows import DEFAULT_ROWS, ROWS

    add_model_args(p)
    p.add_argument("--n", type=int, default=100, help="number of sequential edits per row")
    p.add_argument("--rows", help=f"comma-separated rows, each run from the unedited model: names from {sorted(ROWS)} "
                                  f"or NAME=METHOD[:CONFIG.yaml] (default {DEFAULT_ROWS})")
    p.add_argument("--method", choices=("rome", "mobiedit"), help="one row of this method (instead of --rows)")
    p.add_argument("--config", help="with --method: a YAML method config merged over the method's defaults")
    p.add_argument("--layer", type=int, help="edit layer (default: the model profile's)")
    p.add_argument("--checkpoints", type=int, nargs="*", default=list(DEFAULT_CHECKPOINTS),
                   help="edit counts to score at (capped at --n, which is always one)")
    p.add_argument("--requests", help="request file (default: the model profile's `requests`, the facts it knows; else bundled CounterFact 1k)")
    p.add_argument("--offset", type=int, default=0,
                   help="skip this many requests first (a held-out sequence; the probe follows the edits)")
    p.add_argument("--force", action="store_true", help="apply edits that missed their success criterion")
    p.add_argument("--undo", type=int, default=10, help="random undos to check per row")
    p.add_argument("--probe", type=int, default=20, help="never-edited requests for the drift probe")
    p.add_argument("--ppl-tokens", type=int, default=2048,
                   help="held-out text tokens for the perplexity (256-token windows; 0: no perplexity)")
    p.add_argument("--seed", type=int, default=0, help="seed of the context templates and the searches")
    p.add_argument("--out", help="folder for sequential.json and sequential.png (a path ending in .json: that "
                                 "file, the PNG beside it); rows already there with the same identity are reused")
    p.add_argument("--work", type=Path, help="keep each row's journal in WORK/ROW/journal and its resume state in "
                                             "WORK/ROW/resume.safetensors, saved after every edit: the same command "
                                             "run again continues a stopped row where it stopped (default: temporary)")


def register(sub) -> None:
    """Add the ``sequential`` verb to the ``mobiedit`` subparsers ``sub``."""
    sp = sub.add_parser("sequential", help="sequential-editing bench: rows of many edits on one model (JSON + PNG)")
    add_arguments(sp)
    sp.set_defaults(fn=cmd_sequential)


def _check_args(args) -> None:
    """Refuse bad numbers before any model work: ``--n`` below 1, negative ``--undo`` / ``--probe`` /
    ``--ppl-tokens`` / ``--offset``, a ``--checkpoints`` count below 1 (ConfigError naming the flag)."""
    from .errors import ConfigError

    if args.n < 1:
        raise ConfigError(f"must be >= 1, got {args.n}", where="--n", fix="edit at least one request")
    for flag, value in (("--undo", args.undo), ("--probe", args.probe), ("--ppl-tokens", args.ppl_tokens),
                        ("--offset", args.offset)):
        if value < 0:
            raise ConfigError(f"must be >= 0, got {value}", where=flag, fix="pass 0 or more")
    if any(c < 1 for c in args.checkpoints):
        raise ConfigError(f"must be edit counts >= 1, got {args.checkpoints}", where="--checkpoints",
                          fix="e.g. --checkpoints 10 50 100 (counts above --n are dropped; --n is always one)")


def _settings(args, model_dir: Path):
    """The run's :class:`~mobiedit.sequential_run.SeqSettings` from the parsed arguments (checked
    by :func:`_check_args`)."""
    from .resolve import edit_layer_for, request_file
    from .sequential_run import SeqSettings, checkpoint_marks

    req = request_file(args.requests, model_dir)
    return SeqSettings(model_dir, edit_layer_for(model_dir, args.layer), req, args.n,
                       checkpoint_marks(args.checkpoints, args.n), args.seed, args.force, args.undo, args.probe,
                       args.ppl_tokens, args.offset)


def _checkpoint_saver(name: str, identity: dict, json_path: Path | None, header: dict, results: list[dict],
                      saved: dict[str, dict]):
    """``run_row``'s ``on_checkpoint`` for row ``name``: print the checkpoint's line and, with a
    result file, save the row so far into it (marked ``partial``: never reused, replaced when the
    row finishes), so a run stopped before its end keeps its checkpoints."""
    from .sequential_report import format_checkpoint, save_results

    def save(partial: dict) -> None:
        print(format_checkpoint(name, partial["table"][-1]), flush=True)
        if json_path:
            save_results(json_path, header, results + [{"row": name, "identity": identity, **partial}], saved)
    return save


def cmd_sequential(args) -> int:
    """Run the rows of ``args`` (reusing saved ones), print the tables, write JSON + PNG; 1 when a
    row's undo check failed."""
    import torch

    from .config_io import to_dict
    from .resolve import resolve_model
    from .sequential_report import LEGEND, format_row, format_summary, load_saved, output_paths, reusable, save_results
    from .sequential_rows import row_config, rows_from_args
    from .sequential_run import open_baseline, restore_unedited, run_row, undo_ok

    torch.set_num_threads(1)
    rows = rows_from_args(args.rows, args.method, args.config)  # a bad --rows fails before any model load
    _check_args(args)
    s = _settings(args, resolve_model(args))
    configs = [(row, row_config(row, s.layer, s.seed, s.model_dir, s.n_edits)) for row in rows]
    json_path, png_path = output_paths(args.out) if args.out else (None, None)
    saved = load_saved(json_path) if json_path else {}
    header = {"model": str(s.model_dir), "layer": s.layer, "n": s.n_edits, "checkpoints": list(s.marks),
              "requests": str(s.requests)}
    base, results = None, []
    for row, cfg in configs:
        identity = {"row": row.name, "method": row.method, "config": to_dict(cfg), **s.identity(),
                    **({"batch": row.batch} if row.batch > 1 else {})}
        if reusable(saved.get(row.name), identity):
            print(f"row {row.name}: reused from {json_path} (same config, model, requests, edits, checkpoints, seed)",
                  flush=True)
            results.append(saved[row.name])
            continue
        if base is None:
            base = open_baseline(s)
        restore_unedited(base)
        work = args.work / row.name if args.work else None
        log.info("sequential row %s: %d edits", row.name, s.n_edits)
        res = run_row(base, cfg, s, label=row.name, progress=not args.quiet, work=work, batch=row.batch,
                      on_checkpoint=_checkpoint_saver(row.name, identity, json_path, header, results, saved),
                      identity=identity)
        results.append({"row": row.name, "identity": identity, **res})
        if json_path:
            save_results(json_path, header, results, saved)
    print("\n\n".join(format_row(r) for r in results))
    print(LEGEND)
    print(format_summary(results))
    if json_path:
        from .sequential_plot import plot

        save_results(json_path, header, results, saved)
        plot(results, png_path)
        print(f"wrote {json_path} and {png_path}")
    return 0 if all(undo_ok(r) for r in results) else 1


def run_sequential(model_dir: str | Path, n_edits: int, method: str = "rome", layer: int | None = None,
                   checkpoints: Sequence[int] = DEFAULT_CHECKPOINTS, *, requests: str | Path | None = None,
                   seed: int = 0, force: bool = False, n_undo: int = 10, probe: int = 20,
                   work: str | Path | None = None, progress: bool = False, config: str | None = None,
                   ppl_tokens: int = 2048, offset: int = 0) -> dict:
    """One row of ``method`` (with ``config``; the sequential ladder unless it names one) in this
    process: the result dict of :func:`mobiedit.sequential_run.run_row` (table, per-edit records,
    undo check). ``force`` applies edits that missed their success criterion."""
    from .errors import ConfigError
    from .resolve import edit_layer_for, request_file
    from .sequential_rows import row_config, rows_from_args
    from .sequential_run import SeqSettings, checkpoint_marks, open_baseline, run_row

    if n_edits < 1:
        raise ConfigError(f"must be >= 1, got {n_edits}", where="--n", fix="edit at least one request")
    model_dir = Path(model_dir)
    row = rows_from_args(None, method, config)[0]
    s = SeqSettings(model_dir, edit_layer_for(model_dir, layer),
                    request_file(requests, model_dir), n_edits,
                    checkpoint_marks(checkpoints, n_edits), seed, force, n_undo, probe, ppl_tokens, offset)
    cfg = row_config(row, s.layer, seed, model_dir, n_edits)
    return {"row": row.name, **run_row(open_baseline(s), cfg, s, label=row.name, progress=progress, work=work)}


def main(argv: list[str] | None = None) -> int:
    """``python -m mobiedit.sequential``: the verb's arguments plus ``--quiet`` / ``-v``; exit 2 on
    a :class:`~mobiedit.errors.MobiEditError` or an OS error (one line on stderr), as ``mobiedit``."""
    from .errors import MobiEditError
    from .quiet import cli_logging, quiet_libraries
    from .termsafe import term_safe

    p = argparse.ArgumentParser(prog="python -m mobiedit.sequential", description=__doc__.split("\n")[0])
    add_arguments(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    args = p.parse_args(argv)
    quiet_libraries()
    cli_logging(args.verbose)
    try:
        return cmd_sequential(args)
    except MobiEditError as e:
        print(f"mobiedit: error: {term_safe(e)}", file=sys.stderr)
        return 2
    except OSError as e:  # a read / write failure not named by the command
        from .outputs import named_os_error

        print(f"mobiedit: error: {term_safe(named_os_error(e))}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
