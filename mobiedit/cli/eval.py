"""``mobiedit eval``: score a (possibly edited) model through :func:`mobiedit.api.evaluate`."""
from __future__ import annotations

import argparse
import json

from ._common import Command, model_args, request_args


def add_eval(sp: argparse.ArgumentParser) -> None:
    model_args(sp); request_args(sp); sp.add_argument("--json", help="write per-request scores here")


def cmd_eval(args: argparse.Namespace) -> int:
    """Print the score table; with ``--json``, write the aggregate and per-request scores."""
    import torch

    from .. import api
    from ..evaluate import format_table, scores_json
    from ..outputs import check_output_file
    from ..resolve import load_cli_requests, resolve_model

    torch.set_num_threads(1)
    check_output_file(args.json, "--json")
    reqs = load_cli_requests(args)  # named before any model work
    model_dir = resolve_model(args)
    ev = api.evaluate(model_dir, reqs)
    print(format_table(ev.aggregate, title=f"{model_dir} (locality vs "
                                           f"{'pre-edit model' if ev.against_pre_edit else 'answers'})"))
    if args.json:
        from ..atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps({"aggregate": ev.aggregate, "requests": scores_json(ev.scores)},
                                                indent=1))
    return 0


EVAL = Command(add_eval, cmd_eval, "score a (possibly edited) model on requests")
