"""Fuzz targets for every reader of untrusted input, and ``python -m tools.reliability.fuzz``.

Property checked for each generated input: the reader either accepts it (and what it returns
satisfies the reader's invariants) or raises the project's own error type — a
:class:`~mobiedit.errors.MobiEditError` subclass — whose ``where`` names the file / record /
field, on one line. Anything else (``KeyError``, ``RecursionError``, a library's own exception,
a wrong error type, an error without a location, an accepted-but-invalid result) is a *crash*.

Targets (``TARGETS``):

* ``requests.file`` — arbitrary file contents (bytes, corrupted JSON / JSON Lines, deep nesting,
  huge numbers, bad UTF-8) through :func:`~mobiedit.requests.load_requests`;
* ``requests.counterfact_rome`` / ``requests.counterfact_flat`` / ``requests.zsre`` — the three
  record loaders: a valid record with one field replaced / removed / made near-valid must be
  accepted or rejected with an error naming *that* field (or a field it is checked against); plus
  random records in any format;
* ``requests.cli`` / ``requests.from_dict`` — :func:`~mobiedit.requests.requests_from_cli`,
  :meth:`~mobiedit.requests.EditRequest.from_dict`;
* ``journal`` — a valid journal folder with its ``journal.jsonl`` text, a line's fields, its
  factors files or ``base.safetensors`` damaged (optionally with the sha256 updated, i.e. a
  consistent but hostile journal), then opened, read, rebuilt, baked into a toy model and undone;
* ``native.x0`` / ``native.losses`` / ``native.rank_one`` — the native engine's buffer inputs
  through the public entries :func:`mobiedit.zo.run_zo` (start delta, the loss buffer the forward
  callback returns) and :func:`mobiedit.zo.rank_one_factors`;
* ``native.raw`` — the raw pybind11 extension ``mobiedit._native`` (buffers, sizes, config
  fields). Its documented contract (``mobiedit/_native.pyi``) is ``TypeError`` / ``ValueError``
  for a wrong dtype / shape / layout and project errors for config and numerical faults; those
  builtin errors count as rejections when their message names the argument, and are reported
  separately (``builtin_named``).

The tests (``tests/test_fuzz_readers.py``) run every target with a small example budget; the
script runs a large one and prints the counts::

    python -m tools.reliability.fuzz --examples 10000 [--seed 0] [--json runs/fuzz.json]

The code is split by reader: ``fuzz_core`` (the :class:`Case`, the classifier, shared strategies,
the per-target driver and the tally), ``fuzz_requests``, ``fuzz_journal``, ``fuzz_native``,
``fuzz_bundle`` and ``fuzz_hostile`` (the targets). This module holds the target table and the
command line, and re-exports the names of those modules (``from tools.reliability import fuzz as
F; F.classify``, ``F.build_template_journal``, ...).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from .fuzz_core import (ACCEPTED, BUILTIN, CRASH, JSON_VALUES, KEYS, REJECTED, SCALARS,  # noqa: F401
                        SPECIAL_STRINGS, _FIELD, Case, Tally, Target, _dumps, _field_matches, _peak_rss_mb,
                        classify, field_of, format_tally, fuzz_target, run_case)
from .fuzz_requests import (RELATED, _VALID, _corrupt_text, _get_path, _near_valid,  # noqa: F401
                            _request_invariants, _valid_records, request_from_dict_case, request_record_case,
                            requests_cli_case, requests_file_case, valid_records)
from .fuzz_journal import (_TEMPLATE, _safetensors_blob, build_template_journal, journal_case,  # noqa: F401
                           template_journal)
from .fuzz_native import (_arrays, _quad, _zo_cfg, native_losses_case, native_raw_case,  # noqa: F401
                          native_rank_one_case, native_x0_case)
from .fuzz_bundle import _valid_manifest, bundle_manifest_case  # noqa: F401

# ----------------------------------------------------------------------------- target table and command line

TARGETS: dict[str, Target] = {t.name: t for t in [
    Target("requests.file", requests_file_case, 2.0),
    Target("requests.counterfact_rome", request_record_case("counterfact_rome"), 1.5),
    Target("requests.counterfact_flat", request_record_case("counterfact_flat"), 1.5),
    Target("requests.zsre", request_record_case("zsre"), 1.5),
    Target("requests.cli", requests_cli_case, 0.5),
    Target("requests.from_dict", request_from_dict_case, 0.5),
    Target("journal", journal_case, 2.0),
    Target("bundle.manifest", bundle_manifest_case, 1.0),
    Target("native.x0", native_x0_case, 1.0),
    Target("native.losses", native_losses_case, 1.0),
    Target("native.rank_one", native_rank_one_case, 0.5),
    Target("native.raw", native_raw_case, 1.0),
    Target("bundle.manifest_hostile", lambda data, work: _hostile().manifest_hostile_case(data, work), 1.0),
    Target("journal.hostile", lambda data, work: _hostile().journal_hostile_case(data, work), 1.0),
    Target("model.config", lambda data, work: _hostile().config_case(data, work), 1.0),
]}


def _hostile():
    from . import fuzz_hostile

    return fuzz_hostile


def run_fuzz(examples: int, targets: list[str] | None = None, seed: int | None = None,
             progress: bool = False) -> Tally:
    """Split ``examples`` over ``targets`` by weight and fuzz each; returns the tally."""
    chosen = [TARGETS[t] for t in (targets or list(TARGETS))]
    weight = sum(t.weight for t in chosen)
    tally = Tally()
    root = Path(tempfile.mkdtemp(prefix="mobiedit-fuzz-"))
    try:
        for t in chosen:
            n = max(1, math.ceil(examples * t.weight / weight))
            t0 = time.perf_counter()
            fuzz_target(t, n, tally, root, seed)
            if progress:
                row = tally.counts.get(t.name, {})
                print(f"  {t.name:<28} {sum(row.values()):>6} examples in {time.perf_counter() - t0:6.1f}s",
                      file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return tally


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.reliability.fuzz", description=__doc__.split("\n")[0])
    p.add_argument("--examples", type=int, default=10_000, help="total generated inputs (split by target weight)")
    p.add_argument("--targets", nargs="*", choices=sorted(TARGETS), help="default: all")
    p.add_argument("--seed", type=int, default=None, help="hypothesis seed (default: random)")
    p.add_argument("--json", help="write the counts and crash details here")
    args = p.parse_args(argv)
    import logging

    import torch

    from mobiedit.quiet import quiet_libraries

    torch.set_num_threads(1)
    quiet_libraries()  # the CLI's own silencing: torch / torchao / transformers start-up lines
    logging.basicConfig(level=logging.ERROR)  # loaders log skipped records as warnings
    import resource

    t0 = time.perf_counter()
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    tally = run_fuzz(args.examples, args.targets, args.seed, progress=True)
    wall = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(format_tally(tally))
    print(f"per input: at most {tally.max_seconds * 1000:.0f} ms (slowest: {tally.slowest}; a target's first input, "
          f"which also imports its reader: at most {tally.first_seconds * 1000:.0f} ms); peak RSS of the whole run "
          f"{peak:.0f} MB (after imports {rss0:.0f} MB); largest rise of the peak RSS during one input "
          f"{tally.max_rss_growth_mb:.1f} MB")
    print(f"fuzzed inputs: {tally.total()}  crashes: {tally.total(CRASH)}  named rejections: "
          f"{tally.total(REJECTED)} (+{tally.total(BUILTIN)} named builtin errors of the raw extension)  "
          f"accepted: {tally.total(ACCEPTED)}  wall: {wall:.0f}s")
    for kind, n in sorted(tally.crash_kinds.items(), key=lambda kv: -kv[1]):
        print(f"crash kind ({n}x): {kind}")
    for c in tally.crashes[:10]:
        print(f"CRASH [{c['target']}] {c['detail']}\n    input: {c['input']}")
    if args.json:
        from mobiedit.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps({"counts": tally.counts, "crash_kinds": tally.crash_kinds,
                                                 "crashes": tally.crashes,
                                                 "samples": tally.samples, "wall_seconds": wall,
                                                 "max_input_seconds": tally.max_seconds, "slowest": tally.slowest,
                                                 "peak_rss_mb": peak, "rss_after_imports_mb": rss0,
                                                 "max_rss_growth_mb": tally.max_rss_growth_mb,
                                                 "seed": args.seed}, indent=1))
    return 1 if tally.total(CRASH) else 0


if __name__ == "__main__":
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    sys.exit(main())
