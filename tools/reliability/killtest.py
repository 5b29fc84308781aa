"""SIGKILL crash-safety harness for the writers (docs/reliability.md, "Crash safety").

Each *trial* starts a writer in a child process and SIGKILLs it — after a random delay, or just
before / after a randomly chosen filesystem commit call of the run (for ``edit``: also of the
output folder's swap; :func:`~tools.reliability.kill_proc.arm_crash_point`) — then checks in a
separate verifier process that

* the previous state is intact and loads, or the new state is complete and loads — nothing in
  between (a *torn* state is any other outcome);
* the writer's input is unchanged, and no leftover breaks the next run (the next trial is that
  run; stale temporaries of killed writers are counted and must be gone after the final,
  uninterrupted run).

Writers (``WRITERS``; children and verifiers in :mod:`~tools.reliability.kill_writers` and
:mod:`~tools.reliability.kill_bundle`, the trial loop in :mod:`~tools.reliability.kill_harness`):

* ``edit`` — ``mobiedit edit --out OUT`` on a tiny random llama (``--method rome --layer 0
  --force --limit 2``), alternating between two request slices so that the old and the new
  ``OUT`` differ. OUT loads (:func:`~mobiedit.models.load_model`), its journal opens
  (:meth:`~mobiedit.journal.Journal.open`), its edited module equals the journal's rebuild bit
  for bit, every other parameter equals the input model's, its file set is the complete one and
  its journal's edits are exactly the old or exactly the new slice. Every fifth trial deletes
  the key-statistics cache first so that kills also land in the cache writer; every cached
  statistics file must load and be finite.
* ``edit-fallback`` — the same with ``renameat2(RENAME_EXCHANGE)`` disabled in the child, so the
  folder swap takes :func:`~mobiedit.atomic.atomic_dir`'s two-rename path and recovery.
* ``journal`` — a loop of :meth:`Journal.record` / :meth:`Journal.undo` on a toy model (a fixed,
  seeded plan of operations); the child reports each finished operation on a pipe. After the
  kill the journal must equal the planned state after exactly *n* or *n + 1* operations (*n*
  reported), and every module's rebuild must equal base + the planned active factors bit for
  bit. The journal folder is rotated every ``JOURNAL_ROTATE`` entries.
* ``bundle`` — ``mobiedit edit --bundle B --limit 1 --force`` (one request per run) on a copy of
  one base bundle exported per harness run from the same tiny llama (or ``--bundle-base``).
  B must load with every checksum, its journal must open, and the journal and the files it
  references must be byte-identical to before, or hold exactly the one new entry with the old
  lines and files unchanged (details in :mod:`~tools.reliability.kill_bundle`). Trials chain
  on the previous state; a fresh copy of the base bundle starts when the slots are full.
* ``bundle-race`` — two concurrent writers on one bundle: two ``edit --bundle`` of different
  requests, or an ``edit --bundle`` and a ``mobiedit undo`` of an active edit; one or both are
  SIGKILLed. Every finished write must be present exactly once, ids in order, never reused
  (details in :mod:`~tools.reliability.kill_race`).

Children are forked from this (pre-imported) process so that a trial costs the writer's work,
not Python's start-up; ``--spawn N`` adds N ``edit`` trials run as a fresh ``python -c`` process
instead. This process never runs torch computations itself (verification and the export run in
forked children), so forking is safe.

    python -m tools.reliability.killtest --json runs/killtest.json     # 260 kills (50/20/70/60/60)
    python -m tools.reliability.killtest --kills 400 --spawn 10
    python -m tools.reliability.killtest --edit 2 --edit-fallback 1 --journal 17 --bundle 4 --model DIR \\
        --bundle-base BUNDLE
"""
from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from .kill_harness import JOURNAL_ROTATE, Harness, WriterStats
from .kill_proc import (Forked, Spawned, arm_crash_point, folder_digest, fork_call, kill_after, temps_in)
from .kill_writers import (EDIT_LIMIT, journal_factors, journal_plan, journal_step, make_tiny_llama, param_digests,
                           verify_edit_state, verify_journal_state)

__all__ = ["EDIT_LIMIT", "Forked", "Harness", "JOURNAL_ROTATE", "Spawned", "WRITERS", "WriterStats",
           "arm_crash_point", "folder_digest", "fork_call", "format_report", "journal_factors", "journal_plan",
           "journal_step", "kill_after", "main", "make_tiny_llama", "param_digests", "run", "temps_in",
           "verify_edit_state", "verify_journal_state"]

WRITERS = ("edit", "edit-fallback", "journal", "bundle", "bundle-race")
#: default SIGKILLs per writer (``python -m tools.reliability.killtest`` without flags)
DEFAULT_KILLS = {"edit": 50, "edit-fallback": 20, "journal": 70, "bundle": 60, "bundle-race": 60}


def run(kills: dict[str, int], model: Path | None, work: Path, seed: int, spawn: int = 0,
        verbose: bool = True, max_trials_factor: float = 3.0, bundle_base: Path | None = None,
        bundle_runtime: str = "executorch", race_unlocked: bool = False) -> dict:
    """Run trials until each writer has had its number of SIGKILLs (or ``max_trials_factor`` times
    as many trials); returns the report dict. The bundle writer needs a base bundle: ``bundle_base``
    (copied, never changed), else one exported into ``work`` (reused by later runs on ``work``)."""
    from mobiedit.requests import bundled_path

    t0 = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    if model is None:
        model = work / "tiny_llama"
        if not (model / "model.safetensors").is_file():
            fork_call(make_tiny_llama, str(model))
    base, export_seconds, runtime = None, 0.0, None
    if kills.get("bundle") or kills.get("bundle-race"):
        from .kill_bundle import bundle_info, ensure_base_bundle

        if bundle_base is not None:
            base = Path(bundle_base)
        else:
            base, export_seconds = ensure_base_bundle(work, model, bundle_runtime)
        runtime = fork_call(bundle_info, str(base))["runtime"]
    _preimport(runtime)
    h = Harness(work=work, model=model, requests=bundled_path("counterfact-edit-1k.json"), seed=seed,
                verbose=verbose)
    bundle = race = None
    if base is not None and kills.get("bundle"):
        from .kill_bundle import BundleWriter

        bundle = BundleWriter(h, base)
    if base is not None and kills.get("bundle-race"):
        from .kill_race import RaceWriter

        race = RaceWriter(h, base, unlocked=race_unlocked)
    plan = [(name, k) for name in WRITERS for k in range(kills.get(name, 0))] + \
        [("edit-spawn", k) for k in range(spawn)]
    h.rng.shuffle(plan)
    want = dict(kills, **({"edit-spawn": spawn} if spawn else {}))
    for name, _ in plan:
        while True:
            got = h.stats.get(name, WriterStats())
            if got.kills >= want[name] or got.trials >= max(5, int(max_trials_factor * want[name])):
                break
            before = got.kills
            if name == "journal":
                h.journal_trial()
            elif name == "bundle":
                bundle.trial()
            elif name == "bundle-race":
                race.trial()
            else:
                h.edit_trial(fallback=name == "edit-fallback", spawn=name == "edit-spawn")
            if h.stats[name].kills > before:
                break
    final = h.final_checks()
    if bundle is not None:
        final.update(bundle.final_checks())
        final["leftovers_after_final_runs"]["bundle"] = final.pop("bundle_leftovers")
    if race is not None:
        final.update(race.final_checks())
        final["leftovers_after_final_runs"]["bundle-race"] = final.pop("race_leftovers")
    report = {
        "writers": {k: asdict(v) for k, v in h.stats.items()},
        "kills_total": sum(v.kills for v in h.stats.values()),
        "trials_total": sum(v.trials for v in h.stats.values()),
        "torn_total": sum(v.torn for v in h.stats.values()),
        "torn_details": h.torn_details,
        "final": final,
        "wall_seconds": time.monotonic() - t0,
        "edit_run_seconds": {("spawn" if k else "fork"): h.edit_time(k) for k in h.edit_runs},
        "model": str(model),
        "edit_commit_calls": h.n_calls,
    }
    if race is not None:
        report["bundle_race"] = {"lost_trials": race.lost, "modes": race.modes, "bundles_used": race.index + 1,
                                 "unlocked": race_unlocked, "requests": race.case_ids}
    if base is not None:
        report["bundle"] = {"base": str(base), "runtime": runtime, "export_seconds": round(export_seconds, 1),
                            "run_seconds": bundle.run_time() if bundle else None,
                            "commit_calls": {("first-edit" if k else "later"): v
                                             for k, v in (bundle.calls.items() if bundle else ())},
                            "requests": bundle.case_ids if bundle else None,
                            "bundles_used": bundle.index + 1 if bundle else 0}
    return report


def _preimport(bundle_runtime: str | None = None) -> None:
    """Import everything the writers use so that forked children start warm (no torch compute);
    with ``bundle_runtime`` also the bundle code and that runtime's Python package."""
    from mobiedit import cli  # noqa: F401  (the writers' children run the CLI: pre-import it)
    from mobiedit.quiet import quiet_libraries

    quiet_libraries()
    import torch
    import transformers  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
    from transformers.models.llama import modeling_llama  # noqa: F401

    from mobiedit import evaluate, journal, models, session  # noqa: F401
    from mobiedit.methods import mobiedit as _mobiedit_method, rome  # noqa: F401
    from . import toy  # noqa: F401

    torch.set_num_threads(1)
    cli.build_parser()  # imports the bench / demo / export sub-commands
    if bundle_runtime is not None:
        from mobiedit.export import bundle, ops, packing, runtime, tokenizer  # noqa: F401
        from mobiedit import undo  # noqa: F401
        from . import kill_bundle, kill_race  # noqa: F401

        if bundle_runtime == "executorch":
            from executorch.runtime import Runtime  # noqa: F401
        else:
            import onnxruntime  # noqa: F401


def format_report(rep: dict) -> str:
    head = f"{'writer':<15}{'trials':>7}{'kills':>7}{'at call':>8}{'at swap':>8}{'finished':>9}{'old':>6}" \
           f"{'new':>6}{'torn':>6}{'reader-recovered':>18}{'temps seen':>12}"
    rows = [head]
    for name, s in rep["writers"].items():
        rows.append(f"{name:<15}{s['trials']:>7}{s['kills']:>7}{s['call_kills']:>8}{s['swap_kills']:>8}"
                    f"{s['completed']:>9}{s['old']:>6}{s['new']:>6}{s['torn']:>6}{s['recovered_by_reader']:>18}"
                    f"{s['leftovers_seen']:>12}")
    f = rep["final"]
    left = sum(len(v) for v in f["leftovers_after_final_runs"].values())
    rows.append(f"kills survived: {rep['kills_total']} SIGKILLs in {rep['trials_total']} trials; torn or unloadable "
                f"states: {rep['torn_total']}; final uninterrupted runs ok: edit={f['edit_run_ok']} "
                f"journal={f['journal_run_ok']}"
                + (f" bundle={f['bundle_run_ok']}" if "bundle_run_ok" in f else "")
                + (f" bundle-race={f['race_run_ok']} (lost edits/undos in {f['race_lost_trials']} trials)"
                   if "race_run_ok" in f else "")
                + f"; temporaries left after them: {left}; wall {rep['wall_seconds']:.0f}s")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.reliability.killtest", description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=0,
                   help="total SIGKILLs, split 20%% edit / 10%% edit-fallback / 30%% journal / 20%% bundle / "
                        "20%% bundle-race (overrides the five below)")
    for name, n in DEFAULT_KILLS.items():
        p.add_argument(f"--{name}", type=int, default=n, help=f"SIGKILLs of the {name} writer (default {n})")
    p.add_argument("--spawn", type=int, default=0, help="extra edit kills in a freshly spawned interpreter")
    p.add_argument("--model", help="HF folder to edit (default: a tiny random llama built in --work)")
    p.add_argument("--bundle-base", help="base bundle of the bundle writer, copied (default: exported from the "
                                         "model into --work once, reused by later runs on the same --work)")
    p.add_argument("--bundle-runtime", choices=("executorch", "onnxruntime"), default="executorch",
                   help="runtime of the exported base bundle")
    p.add_argument("--race-unlocked", action="store_true",
                   help="bundle-race children run without the journal lock (shows that the checks catch lost edits)")
    p.add_argument("--work", help="working folder (default: a new temporary folder, removed afterwards)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the report here")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    kills = {name: getattr(args, name.replace("-", "_")) for name in WRITERS}
    if args.kills:
        e, f, j, b = (round(args.kills * x) for x in (0.20, 0.10, 0.30, 0.20))
        kills = {"edit": e, "edit-fallback": f, "journal": j, "bundle": b, "bundle-race": args.kills - e - f - j - b}
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="mobiedit-killtest-"))
    try:
        rep = run(kills, Path(args.model) if args.model else None, work, args.seed, args.spawn,
                  verbose=not args.quiet, bundle_base=Path(args.bundle_base) if args.bundle_base else None,
                  bundle_runtime=args.bundle_runtime, race_unlocked=args.race_unlocked)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(format_report(rep))
    if args.json:
        from mobiedit.atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps(rep, indent=1))
    f = rep["final"]
    ok = rep["torn_total"] == 0 and f["journal_run_ok"] and f.get("bundle_run_ok", True) and not any(
        f["leftovers_after_final_runs"].values()) and f.get("race_run_ok", True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
