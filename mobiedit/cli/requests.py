"""``mobiedit requests known``: request-set tools."""
from __future__ import annotations

import argparse

from ._common import Command, model_args


def add_requests(sp: argparse.ArgumentParser) -> None:
    rsub = sp.add_subparsers(dest="requests_cmd", required=True, help="the tool to run")
    sp = rsub.add_parser("known", help="keep the requests whose true answer the model produces greedily")
    model_args(sp, preset=False)
    sp.add_argument("--from", dest="sources", nargs="+", required=True, metavar="FILE", help="request files")
    sp.add_argument("--out", required=True, help="JSON file of the kept requests (flat form, written atomically)")
    sp.add_argument("--limit", type=int, default=0, help="scan the first N records of each file (0: all)")
    sp.add_argument("--rule", choices=("whole", "first-token"), default="whole",
                    help="keep when the whole answer (default) or only its first token is produced")
    sp.add_argument("--batch-size", type=int, default=16, help="prompts per forward")
    sp.set_defaults(fn=cmd_requests_known)


def cmd_requests_known(args: argparse.Namespace) -> int:
    """Keep the requests whose true answer the model produces greedily (mobiedit.known)."""
    import torch

    from ..api import load_model
    from ..known import scan_known, write_known
    from ..resolve import resolve_model

    torch.set_num_threads(1)
    lm = load_model(resolve_model(args))
    scan = scan_known(lm.model, lm.tokenizer, args.sources, rule=args.rule, limit=args.limit,
                      batch_size=args.batch_size, progress=not args.quiet)
    print(scan.summary())
    write_known(args.out, scan)
    print(f"wrote {args.out} ({len(scan.records)} requests)")
    return 0


REQUESTS = Command(add_requests, cmd_requests_known, "request-set tools (`requests known`)")
