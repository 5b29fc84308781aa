"""Peak RSS of bench-shape's MobiEdit child with and without the write check (verify after write).

    python tools/probe_write_check_rss.py --verify 1 [--shape qwen2-0.5b --layer 5 --steps 3 --work DIR]

Builds the shape's fixed-seed random checkpoint and its pre-quantized copy once under ``--work``
(in child processes, so this process's peak is the edit's alone), then runs the MobiEdit child of
``mobiedit bench-shape`` in this process with ``MobiEditConfig.verify_write`` set as asked, and
prints its peak RSS (MB). Run once per setting; compare the two numbers.
"""
from __future__ import annotations

import argparse
import functools
import json
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verify", type=int, choices=(0, 1), required=True)
    ap.add_argument("--shape", default="qwen2-0.5b")
    ap.add_argument("--layer", type=int, default=5)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--work", type=Path, default=Path("runs/probe_write_check"))
    args = ap.parse_args()

    import mobiedit.bench_shape as bs
    import mobiedit.methods.mobiedit as mm

    fp32, q = args.work / "fp32", args.work / "w8a16"
    if not (q / "config.json").is_file():
        args.work.mkdir(parents=True, exist_ok=True)
        bs._spawn(bs._build_child, (args.shape, str(fp32)), "build")
        bs._spawn(bs._quantize_child, (str(fp32), args.layer, str(q)), "quantize")
    mm.MobiEditConfig = functools.partial(mm.MobiEditConfig, verify_write=bool(args.verify),
                                          **({} if args.verify else {"stop_on": "loop"}))
    out = args.work / f"verify{args.verify}.json"
    bs._child("mobiedit", str(q), args.layer, args.steps, str(out))
    res = json.loads(out.read_text())
    print(f"verify_write={bool(args.verify)}: peak RSS {res['peak_rss_mb']:.0f} MB, {res['wall_per_step_s']:.2f} s/step")


if __name__ == "__main__":
    main()
