"""One figure of rows from several ``mobiedit sequential`` result files (rows run in separate
processes, e.g. a new write beside the row it is compared with)::

    python tools/plot_sequential.py results/seq_smollm2_425/sequential_rome.json \\
        results/seq_smollm2_425/sequential_rome_kr10.json --out results/seq_smollm2_425/rome_key_refresh.png

The figure is ``mobiedit sequential``'s own (:func:`mobiedit.sequential_plot.plot`), one line per row.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from mobiedit.sequential_plot import plot  # noqa: E402


def rows(paths: list[Path]) -> list[dict]:
    """Every row of every result file, in order; SystemExit naming a file that is not one."""
    out = []
    for p in paths:
        try:
            out.extend(json.loads(p.read_text())["rows"])
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise SystemExit(f"{p}: not a mobiedit sequential result file ({type(e).__name__}: {e}); "
                             "pass the sequential.json a run wrote") from None
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", type=Path, nargs="+", help="sequential.json files")
    ap.add_argument("--out", type=Path, required=True, help="the PNG to write")
    a = ap.parse_args(argv)
    plot(rows(a.results), a.out)
    print(a.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
