"""Time a bundle's value search with the loop's check after the update and on the step's own row
(``zo.check_at`` "update" vs "base", docs/zo_spec.md §4), side by side on one thread.

    python tools/time_bundle_check.py --bundle DIR --n 20 --out runs/bundle_check.json

Each request is searched twice on the bundle's programs (the journal's active edits in the slots,
nothing written), the two modes alternating which goes first. Prints, per mode, the edit-program
calls, loss evaluations and seconds per search (medians and totals), their ratios, and whether the
two searches stopped at the same delta with the same verdict; writes the per-request rows as JSON.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from pathlib import Path

MODES = ("update", "base")


def _counting(program) -> list[int]:
    """Wrap ``program.run`` to count its calls (returns the one-element counter)."""
    calls = [0]
    run = program.run

    def counted(feed):
        calls[0] += 1
        return run(feed)

    program.run = counted
    return calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", required=True, help="an exported bundle folder")
    ap.add_argument("--requests", default=None, help="request file (default: the bundled CounterFact 1k)")
    ap.add_argument("--offset", type=int, default=0)
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--out", default=None, help="JSON of the per-request rows")
    args = ap.parse_args()

    import torch

    from mobiedit.atomic import atomic_write_text
    from mobiedit.export.bundle import load_bundle
    from mobiedit.export.ops import search_bundle_edit
    from mobiedit.export.recipe import recipe_of
    from mobiedit.quiet import quiet_libraries
    from mobiedit.requests import bundled_path, load_requests

    torch.set_num_threads(1)
    quiet_libraries()
    b = load_bundle(args.bundle)
    calls = _counting(b.program("edit"))
    journal, keystats = b.journal(readonly=True), b.keystats()
    base_zo = recipe_of(b.manifest).zo
    reqs = load_requests(args.requests or bundled_path("counterfact-edit-1k.json"))[args.offset:args.offset + args.n]
    rows = []
    for i, req in enumerate(reqs):
        row = {"case_id": req.case_id}
        for mode in (MODES if i % 2 == 0 else MODES[::-1]):
            zo = dataclasses.replace(base_zo, check_at=mode)
            before, t0 = calls[0], time.perf_counter()
            found = search_bundle_edit(b, journal, keystats, req, zo=zo)
            row[mode] = {"seconds": time.perf_counter() - t0, "program_calls": calls[0] - before,
                         "evals": found.loss_evals, "status": found.status, "succeeded": found.succeeded,
                         "delta": found.delta.tolist()}
        row["same_delta"] = row["update"]["delta"] == row["base"]["delta"]
        row["same_verdict"] = row["update"]["succeeded"] == row["base"]["succeeded"]
        for mode in MODES:
            del row[mode]["delta"]
        rows.append(row)
        print(f"{i + 1}/{len(reqs)} {req.case_id}: " + "  ".join(
            f"{m} {row[m]['program_calls']} calls {row[m]['seconds']:.2f} s" for m in MODES), flush=True)

    def med(mode: str, key: str) -> float:
        return statistics.median(r[mode][key] for r in rows)

    def total(mode: str, key: str) -> float:
        return sum(r[mode][key] for r in rows)

    print(f"\n{len(rows)} requests, bundle {args.bundle} ({b.runtime}), K = {b.manifest['shapes']['edit_K']}")
    print(f"{'check_at':9} {'calls med':>9} {'calls sum':>9} {'evals med':>9} {'s med':>7} {'s sum':>8} {'succ':>5}")
    for m in MODES:
        print(f"{m:9} {med(m, 'program_calls'):9.0f} {total(m, 'program_calls'):9.0f} {med(m, 'evals'):9.0f} "
              f"{med(m, 'seconds'):7.2f} {total(m, 'seconds'):8.1f} {sum(r[m]['succeeded'] is True for r in rows):5d}")
    print(f"base / update: program calls {total('base', 'program_calls') / total('update', 'program_calls'):.3f}, "
          f"seconds {total('base', 'seconds') / total('update', 'seconds'):.3f}; same delta "
          f"{sum(r['same_delta'] for r in rows)}/{len(rows)}, same verdict {sum(r['same_verdict'] for r in rows)}/{len(rows)}")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(Path(args.out), json.dumps({"bundle": str(args.bundle), "runtime": b.runtime,
                                                      "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
