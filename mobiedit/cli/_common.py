"""What the ``mobiedit`` verbs share: the command record, the model and request argument groups.

Only modules of :mod:`mobiedit.cli` import this (the bench, demo and export verbs, which register
their own parsers, resolve their flags through :mod:`mobiedit.resolve`).
"""
from __future__ import annotations

import argparse
from typing import Callable, NamedTuple

from ..resolve import add_model_args


class Command(NamedTuple):
    """One verb: ``add_arguments(parser)`` declares its flags, ``run(args)`` returns the exit code
    (a :class:`~mobiedit.errors.MobiEditError` it raises becomes exit code 2), ``help`` is its
    line in ``mobiedit --help``."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    help: str


def model_args(sp: argparse.ArgumentParser, preset: bool = True) -> None:
    """``--model`` / ``--preset`` (:func:`mobiedit.resolve.add_model_args`)."""
    add_model_args(sp, preset)


def request_args(sp: argparse.ArgumentParser) -> None:
    """``--requests FILE`` or one ad-hoc ``--subject/--prompt/--target`` request, and the
    ``--limit/--offset`` slice (read by :func:`mobiedit.resolve.load_cli_requests`)."""
    sp.add_argument("--requests", help="request file (CounterFact ROME/flat form or zsRE; JSON or JSON Lines)")
    sp.add_argument("--subject", help="one request on the command line: the subject, e.g. \"Danielle Darrieux\"")
    sp.add_argument("--prompt", help="its prompt with {} where the subject goes, e.g. \"{}'s mother tongue is\"")
    sp.add_argument("--target", help="the new answer, e.g. \"English\"")
    sp.add_argument("--limit", type=int, default=0, help="use the first N requests (after --offset)")
    sp.add_argument("--offset", type=int, default=0, help="skip the first N requests of the file")
