"""Flags of the export benchmark, shared by ``mobiedit bench-export`` and ``python -m
mobiedit.export.bench`` (no heavy imports: the CLI registers them at start-up)."""
from __future__ import annotations

import argparse


def bench_arguments(p: argparse.ArgumentParser) -> None:
    """Flags of the export benchmark (``mobiedit bench-export``, ``python -m mobiedit.export.bench``)."""
    p.add_argument("--out", required=True, help="folder for bench.json (and the exported bundle)")
    p.add_argument("--model", help="model folder or checkpoint name (default: random 0.5B Qwen2 under --out)")
    p.add_argument("--bundle", help="measure this already exported bundle of --model instead of exporting")
    p.add_argument("--runtime", default="executorch", choices=("executorch", "onnxruntime"), help="the bundle's runtime")
    p.add_argument("--quant", default="8da8w", help="quantization of the exported programs")
    p.add_argument("--decode-tokens", type=int, default=32, help="tokens decoded per timing")
    p.add_argument("--prompt", help="prompt both sides decode after (default: bench.BENCH_PROMPT)")
    p.add_argument("--float-head", action="store_true", help="keep the LM head and embedding float")
