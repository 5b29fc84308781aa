"""``mobiedit edit`` (a model folder through :func:`mobiedit.api.edit`, or a phone bundle) and
``mobiedit undo``."""
from __future__ import annotations

import argparse
from pathlib import Path

from ..errors import ConfigError
from ..termsafe import term_safe
from ._common import Command, model_args, request_args

#: ``--method`` choices, in :data:`mobiedit.methods.METHODS` order (tests/test_api.py checks the two agree)
METHOD_NAMES = ("rome", "mobiedit")


def add_edit(sp: argparse.ArgumentParser) -> None:
    model_args(sp); request_args(sp)
    sp.add_argument("--method", choices=METHOD_NAMES, default="mobiedit",
                    help="mobiedit: forward-only value search (default); rome: backprop (the baseline)")
    sp.add_argument("--config", help="YAML method config (a partial config over the defaults and the model profile)")
    sp.add_argument("--layer", type=int, help="edit layer (default: the model profile's, from `mobiedit trace`)")
    sp.add_argument("--out", help="new folder for the edited model (HF safetensors, tokenizer, edit journal)")
    sp.add_argument("--seed", type=int, default=None,
                    help="search seed (default 0; with --bundle: the seed of the bundle's recipe)")
    sp.add_argument("--force", action="store_true", help="apply edits that missed their success criterion")
    sp.add_argument("--bundle", help="edit a phone bundle through its edit program instead")
    sp.add_argument("--batch", type=int, default=1,
                    help="edits per solve: each request searched alone, then one solve meets every request of "
                         "the batch at its key (MEMIT/AlphaEdit form; default 1: one edit after another)")
    sp.add_argument("--overwrite", action="store_true",
                    help="replace a non-empty --out folder that is not a previous `mobiedit edit` output")
    sp.add_argument("--repair", action="store_true",
                    help="with --bundle: after each edit, re-teach every earlier edit the bundle no longer says "
                         "(a new journal entry per repair; undoing an edit undoes its repairs)")
    sp.add_argument("--stop-on", choices=("loop", "written"), default=None,
                    help="with --bundle: stop each search on the loop's own rule, or only where the written edit "
                         "also holds (default: the bundle recipe's success.stop_on; new bundles: written)")


def _bundle_edit(args: argparse.Namespace) -> int:
    from ..export.cli import bundle_edit

    for flag, given in (("--method", args.method != "mobiedit"), ("--config", args.config),
                        ("--layer", args.layer is not None), ("--out", args.out), ("--batch", args.batch != 1)):
        if given:
            raise ConfigError(f"{flag} does not apply to a bundle edit", where=flag,
                              fix="drop it: a bundle is edited in place by its own forward-only edit program, "
                                  "at the layer and with the recipe it was exported with")
    return bundle_edit(args)


def cmd_edit(args: argparse.Namespace) -> int:
    """Edit the requests one after another and write the edited folder (with its journal) to
    ``--out``; print each outcome and the in-memory scores. Exit 1 when an edit was not applied."""
    if args.bundle:
        return _bundle_edit(args)
    if args.repair:
        raise ConfigError("--repair applies to a bundle edit", where="--repair",
                          fix="pass --bundle BUNDLE, or drop --repair (eager sessions climb the clamp ladder)")
    if args.stop_on is not None:
        raise ConfigError("--stop-on applies to a bundle edit", where="--stop-on",
                          fix="pass --bundle BUNDLE, or drop --stop-on (eager edits verify after write)")
    if args.seed is None:
        args.seed = 0
    if not args.out:
        raise ConfigError("no output folder", where="--out", fix="pass --out DIR (a new HF folder is written there)")
    import torch

    from .. import api
    from ..evaluate import aggregate, format_table
    from ..resolve import load_cli_requests, resolve_model

    torch.set_num_threads(1)
    reqs = load_cli_requests(args)  # a bad request is named before any model work (training the fact LM)
    model_dir = resolve_model(args)
    records = api.edit(model_dir, reqs, args.method, args.config, args.out, layer=args.layer, seed=args.seed,
                       force=args.force, overwrite=args.overwrite, inputs=(args.requests,), score=True,
                       progress=not args.quiet, batch=args.batch)
    failed = [r for r in records if not r.applied]
    for r in records:
        o = r.outcome
        check = "" if o.loop_succeeded is None else f" edited-model-check={'pass' if o.succeeded else 'FAIL'}"
        check += f" batch={o.config['batch']}" if "batch" in o.config else ""
        print(f"{term_safe(r.request.case_id)}: {o.status} applied={r.applied} loss_evals={o.loss_evals} "
              f"wall={o.wall_time:.2f}s{check}")
    print(format_table(aggregate([r.scores for r in records]),
                       title=f"in-memory scores after {len(records) - len(failed)} edits"))
    print(f"wrote {Path(args.out)}" + (f"; {len(failed)} edit(s) not applied (missed the success criterion; --force "
                                 "applies them)" if failed else ""))
    return 1 if failed else 0


def add_undo(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("dir", help="model folder written by `mobiedit edit --out`, or a bundle")
    sp.add_argument("edit_id", type=int, help="journal id of the edit")


def cmd_undo(args: argparse.Namespace) -> int:
    """Undo one journaled edit of an ``edit --out`` folder or a bundle (bit-exact)."""
    from ..undo import undo_edit

    entry = undo_edit(args.dir, args.edit_id)
    print(f"undid edit {entry.id} ({term_safe(entry.request.get('case_id'))}) in {term_safe(args.dir)}")
    return 0


EDIT = Command(add_edit, cmd_edit, "edit a model and write a new HF folder with a journal")
UNDO = Command(add_undo, cmd_undo, "undo one journaled edit of a model folder (`edit --out`) or a bundle")
