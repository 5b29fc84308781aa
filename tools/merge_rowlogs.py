"""Merge the bench row logs of slices run in scratch folders into the row's log, e.g. two slices of
a real model's row run side by side (``mobiedit bench ... --offset N --n M --out /tmp/gX``, each
folder seeded with a copy of the row's log)::

    python tools/merge_rowlogs.py results/bench_gemma/row-fzoo-stopw-L2.jsonl /tmp/gE/row-fzoo-stopw-L2.jsonl \\
        /tmp/gF/row-fzoo-stopw-L2.jsonl

Every source must carry the destination's identity line. A request already in the destination
must be the same line in the source (a seeded copy, not another measurement of it); a request in
two sources must be the same line in both. The new records are appended in source order, the
destination rewritten atomically (temporary file, fsync, rename). Prints what was added; exit 1,
writing nothing, on any mismatch. A line a kill cut short (not JSON) is skipped, as
:class:`mobiedit.rowlog.RowLog` does.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mobiedit.atomic import atomic_write_text  # noqa: E402


def read_log(path: Path) -> tuple[str, dict[str, str]]:
    """The identity line and the records (case id -> line, in file order) of a row log."""
    identity, recs = None, {}
    for line in path.read_text().splitlines():
        try:
            obj = json.loads(line)
        except ValueError:
            continue  # torn tail
        if "identity" in obj:
            identity = line
        elif "case_id" in obj:
            recs[obj["case_id"]] = line
    if identity is None:
        raise ValueError(f"{path}: no identity line (not a bench row log)")
    return identity, recs


def merge(dest: Path, sources: list[Path]) -> list[str]:
    """Append the sources' new records to ``dest``; return the added case ids. ValueError on a mismatch."""
    identity, have = read_log(dest)
    added: dict[str, str] = {}
    for src in sources:
        ident, recs = read_log(src)
        if ident != identity:
            raise ValueError(f"{src}: another identity than {dest}'s")
        for case, line in recs.items():
            known = have.get(case, added.get(case))
            if known is not None and known != line:
                raise ValueError(f"{src}: request {case} differs from the record already merged")
            if known is None:
                added[case] = line
    if added:
        text = dest.read_text()
        text = text[: text.rfind("\n") + 1] if not text.endswith("\n") else text
        atomic_write_text(dest, text + "".join(line + "\n" for line in added.values()))
    return list(added)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dest", type=Path)
    ap.add_argument("sources", type=Path, nargs="+")
    args = ap.parse_args(argv)
    try:
        added = merge(args.dest, args.sources)
    except (OSError, ValueError) as e:
        print(f"merge_rowlogs: {e}", file=sys.stderr)
        return 1
    print(f"{len(added)} records added to {args.dest}" + "".join(f"\n  {c}" for c in added))
    return 0


if __name__ == "__main__":
    sys.exit(main())
