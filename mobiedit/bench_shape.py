"""Time and memory at a real model's shape (random weights): one edit per row — backprop ROME,
the memory-lean backprop ``rome-lean``, forward-only MobiEdit — each in its own child process, with
a fixed step count (a random model has no success signal), plus the prefix-reuse speed-up at that
shape. MobiEdit's and rome-lean's children load a pre-quantized checkpoint (``mobiedit quantize``:
int8 weights, the edit layer's MLP output float, the LM head stored bf16 and computed fp32), as a
phone holds its model; rome-lean backprops through the prefix graph of those same weights (layers
after the edit layer, positions from the subject on, no weight gradients). ROME's child loads the
fp32 checkpoint. Every child fixes glibc's mmap threshold (:func:`mobiedit.rss.return_freed_memory`)
unless ``--malloc glibc``: the fixed threshold makes peak RSS live memory but slows every large
allocation (a forward-only step more than a backprop one), so time and memory can be read from a
run of each mode.

Shapes are data (HF config kwargs per name); the tokenizer is one trained on the bundled prompts.
"""
from __future__ import annotations

import json
import logging
import os
import socket
import tempfile
import time
from pathlib import Path

from .bench_shape_ort import ORT_ROW
from .errors import ConfigError
from .quiet import NOTICE

log = logging.getLogger(__name__)

SHAPES: dict[str, tuple[str, dict]] = {
    # Qwen2.5-0.5B's shape: 494M parameters
    "qwen2-0.5b": ("qwen2", dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                                 num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                                 max_position_embeddings=512)),
    # Qwen2.5-3B's shape: 3.09B parameters (the MobiEdit paper's model size)
    "qwen2-3b": ("qwen2", dict(hidden_size=2048, intermediate_size=11008, num_hidden_layers=36, num_attention_heads=16,
                               num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                               max_position_embeddings=512)),
    "qwen2-tiny": ("qwen2", dict(hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
                                 num_key_value_heads=2, vocab_size=4096, tie_word_embeddings=True,
                                 max_position_embeddings=512)),
}


#: the rows a shape run can time: name -> the checkpoint its child loads. The ``-bf16`` rows run
#: their loop on bf16 matmuls (``QuantConfig("bf16")``, a loop scheme, not a checkpoint format) with
#: the head stored bf16 as in the pre-quantized checkpoint: they load the fp32 checkpoint and search
#: on a bf16 copy of it, so their peak RSS is the desktop emulation's (float model + bf16 copy), not
#: a phone's; their s/step is the figure they add.
SHAPE_ROWS = {"rome": "fp32", "rome-lean": "w8a16", "mobiedit": "w8a16",
              "rome-lean-bf16": "fp32", "mobiedit-bf16": "fp32",
              # mobiedit-bf16 with the read-out's differences on bf16 operands (quant.head_matmul bf16)
              "mobiedit-bf16h": "fp32",
              # the same search on ONNX Runtime nbits programs exported from the fp32 checkpoint, hosted
              # without torch (:mod:`mobiedit.bench_shape_ort`)
              "mobiedit-ort": "fp32"}

#: the ratio pairs (A, B) reported as A/B when both rows ran; same precision pairs beside ROME's
RATIO_PAIRS = (("mobiedit", "rome"), ("mobiedit", "rome-lean"), ("rome-lean", "rome"),
               ("mobiedit-bf16", "rome"), ("mobiedit-bf16", "rome-lean-bf16"), ("rome-lean-bf16", "rome"),
               ("mobiedit-bf16", "mobiedit"), ("mobiedit-bf16h", "rome"), ("mobiedit-bf16h", "rome-lean-bf16"),
               ("mobiedit-bf16h", "mobiedit-bf16"), ("mobiedit-ort", "rome"), ("mobiedit-ort", "rome-lean"),
               ("mobiedit-ort", "mobiedit"))

BUILD_SEED = 0  # random-init weights of the benchmark model (in the build child only)


def build_random(shape: str, folder: Path) -> None:
    """Write a random-init model of ``shape`` with a small BPE tokenizer to ``folder``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    from .corpora import counterfact_records
    from .factlm.train import train_tokenizer

    if shape not in SHAPES:
        raise ConfigError(f"unknown shape {shape!r}", where="--shape", fix=f"use one of {sorted(SHAPES)}")
    family, kw = SHAPES[shape]
    recs, _ = counterfact_records()
    tok = train_tokenizer([f"{r['prompt']} {r['ground_truth']}" for r in recs], 1024)
    cfg = AutoConfig.for_model(family, bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                               pad_token_id=tok.pad_token_id, **kw)
    # the same weights every run: the context templates a random model generates (and with
    # them every activation size of both edits) depend on the weights
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(BUILD_SEED)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)


def _rss_mb() -> float:
    from .rss import peak_rss_mb

    return peak_rss_mb()


def shape_config(row: str, layer: int, steps: int):
    """The method config of a :data:`SHAPE_ROWS` row: exactly ``steps`` steps, no success stop, no
    key statistics (random weights); MobiEdit with the shipped estimator."""
    from .editing.config import ROMEConfig
    from .forward.quant import QuantConfig
    from .methods.mobiedit import MobiEditConfig
    from .recipes import FZOO
    import dataclasses

    if row not in SHAPE_ROWS:
        raise ConfigError(f"unknown row {row!r}", where="--rows", fix=f"use rows from {list(SHAPE_ROWS)}")
    base = row.removesuffix("-bf16h").removesuffix("-bf16").removesuffix("-ort")
    bf16, head = row.endswith(("-bf16", "-bf16h")), "bf16" if row.endswith("-bf16h") else "float32"
    if base in ("rome", "rome-lean"):
        quant = {"quant": QuantConfig("bf16", head_dtype="bfloat16")} if bf16 else {}  # else: the weights it loads
        return ROMEConfig(layer=layer, steps=steps, early_loss=0.0, mom2_adjustment=False,
                          prefix_reuse=base == "rome-lean", **quant)
    zo = dataclasses.replace(FZOO.zo, max_steps=steps, max_evals=10**6, check_every=10**6)
    quant = QuantConfig("bf16", head_dtype="bfloat16", head_matmul=head) if bf16 else QuantConfig("w8a16")  # w8a16: the checkpoint's
    return MobiEditConfig(layer=layer, zo=zo, quant=quant, early_stop=False,
                          mom2_adjustment=False)


def _child(method: str, folder: str, layer: int, steps: int, out: str, malloc: str = "fixed") -> None:
    """One edit of row ``method`` in this (spawned) process. ``folder`` is the checkpoint of
    :data:`SHAPE_ROWS`: fp32 for ROME, the pre-quantized one (`mobiedit quantize`) — the model a
    phone would hold — for the others."""
    import dataclasses

    import torch

    torch.set_num_threads(1)
    from .quiet import quiet_libraries
    from .models import load_model
    from .requests import bundled_path, load_requests
    from .session import prepare, run_method
    from .rss import return_freed_memory

    quiet_libraries()
    malloc_tuned = return_freed_memory() if malloc == "fixed" else False  # every row's child alike
    req = load_requests(bundled_path("counterfact-edit-1k.json"))[0]
    base = _rss_mb()  # the interpreter + torch + transformers, before any weight
    lm = load_model(folder)
    loaded = _rss_mb()
    cfg = shape_config(method, layer, steps)
    ctx = prepare(lm, cfg, seed=0)
    t0 = time.perf_counter()
    res = run_method(lm, req, cfg, ctx)
    wall = time.perf_counter() - t0
    peak = _rss_mb()
    Path(out).write_text(json.dumps(res.summary() | {
        "wall_per_step_s": wall / steps, "peak_rss_mb": peak, "runtime_rss_mb": base, "after_load_rss_mb": loaded,
        "peak_minus_runtime_mb": peak - base, "malloc_mmap_threshold_1mib": malloc_tuned, "layer": dataclasses.asdict(cfg)["layer"]}))


def _build_child(shape: str, folder: str) -> None:
    import torch

    torch.set_num_threads(1)
    from .quiet import quiet_libraries

    quiet_libraries()
    build_random(shape, Path(folder))


def _quantize_child(folder: str, layer: int, out: str) -> None:
    import torch

    torch.set_num_threads(1)
    from .quiet import quiet_libraries
    from .forward.quant import QuantConfig
    from .forward.quant_save import save_quantized

    quiet_libraries()
    save_quantized(folder, out, layer, QuantConfig("w8a16", head_dtype="bfloat16"))


def _spawn(target, args: tuple, what: str) -> None:
    from .bench import spawn_watched

    code = spawn_watched(target, args)
    if code != 0:
        raise ConfigError(f"{what} child failed (exit {code})", where="bench-shape", fix="rerun with -v")


def run_ort_row(folder: Path, layer: int, steps: int, workdir: Path, malloc: str, ort: dict) -> dict:
    """The :data:`ORT_ROW` row: its export child, then its measured child (no torch)."""
    from .bench_shape_ort import export_child, measured_child

    programs, out = workdir / "ort-programs", workdir / f"{ORT_ROW}.json"
    _spawn(export_child, (str(folder), layer, ort["bits"], ort["head_bits"], ort["program_K"], str(programs)),
           f"{ORT_ROW} export")
    zo = shape_config(ORT_ROW, layer, steps).zo.as_dict()
    _spawn(measured_child, (str(programs), zo, steps, str(out), malloc), ORT_ROW)
    return json.loads(out.read_text())


def run_child(method: str, folder: Path, layer: int, steps: int, workdir: Path, malloc: str = "fixed") -> dict:
    out = workdir / f"{method}.json"
    _spawn(_child, (method, str(folder), layer, steps, str(out), malloc), method)
    return json.loads(out.read_text())


def row_identity(shape: str, row: str, layer: int, steps: int, malloc: str = "fixed", ort: dict | None = None) -> dict:
    """What a saved row must match to be reused: shape, row, layer, steps, the row's method config
    and the allocator mode (``fixed``, the default, adds no key: rows saved before the mode existed);
    the ONNX Runtime row also its ``ort`` settings (weight bits, deltas per program call)."""
    import dataclasses

    cfg = json.loads(json.dumps(dataclasses.asdict(shape_config(row, layer, steps)), default=str))
    return {"shape": shape, "shape_config": SHAPES[shape][1], "row": row, "layer": layer, "steps": steps, "config": cfg} | (
        {} if malloc == "fixed" else {"malloc": malloc}) | ({"ort": ort} if row == ORT_ROW else {})


def rows_dir_for(out: str | None) -> Path | None:
    """Where a run with ``--out OUT`` keeps each finished row (``OUT.rows/ROW.json``), so that a run
    stopped part-way resumes with the rows it lacks (a 3B-shape row takes an hour here)."""
    return None if not out else Path(out).with_name(Path(out).name + ".rows")


def saved_row(rows_dir: Path | None, identity: dict) -> dict | None:
    """The row saved under ``rows_dir`` for ``identity``; None when absent, unreadable or of another run."""
    p = rows_dir / f"{identity['row']}.json" if rows_dir else None
    if p is None or not p.is_file():
        return None
    try:
        d = json.loads(p.read_text())
    except ValueError:
        log.warning("ignoring unreadable saved row %s", p)
        return None
    if not isinstance(d, dict) or d.get("identity") != identity:
        log.warning("saved row %s is of another shape, layer, step count or config: rerunning it", p)
        return None
    return d["result"]


def save_row(rows_dir: Path, identity: dict, result: dict) -> None:
    from .atomic import atomic_write_text

    rows_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(rows_dir / f"{identity['row']}.json", json.dumps({"identity": identity, "result": result}, indent=1))


def _prefix_child(folder: str, layer: int, K: int, reps: int, out: str) -> None:
    import torch

    torch.set_num_threads(1)
    from .bench_prefix import measure
    from .quiet import quiet_libraries

    quiet_libraries()
    # each forward's step beside fp32 eager; the full graph (the prefix speed-up) timed on fp32 only
    res = [measure(folder, layer, 1, K, reps, q, full=q == "none") for q in ("none", "w8a16", "bf16")]
    Path(out).write_text(json.dumps(res))


def run_prefix_child(folder: Path, layer: int, K: int, reps: int, workdir: Path) -> list[dict]:
    out = workdir / "prefix.json"
    _spawn(_prefix_child, (str(folder), layer, K, reps, str(out)), "prefix")
    return json.loads(out.read_text())


def shape_ratios(rows: dict) -> dict:
    """``"A/B"`` -> peak RSS, peak RSS net of the Python runtime and wall time per step of row A
    over row B, for every pair of :data:`RATIO_PAIRS` whose rows both ran;
    ``same_run`` says whether both rows were timed in one run (rows resumed from an earlier run's
    ``OUT.rows/`` keep their memory figures, but their wall ratio is not a measurement)."""
    out = {}
    for a, b in RATIO_PAIRS:
        if a in rows and b in rows:
            ra, rb = rows[a], rows[b]
            out[f"{a}/{b}"] = {"peak_rss": ra["peak_rss_mb"] / rb["peak_rss_mb"],
                               "peak_rss_net_of_runtime": ra["peak_minus_runtime_mb"] / rb["peak_minus_runtime_mb"],
                               "wall_per_step": ra["wall_per_step_s"] / rb["wall_per_step_s"],
                               # a wall ratio is a measurement only between rows timed in one run
                               "same_run": ra.get("run_id") == rb.get("run_id")}
    return out


def cmd_bench_shape(args) -> int:
    from .atomic import atomic_write_text
    from .bench_prefix import format_result

    names = [x.strip() for x in args.rows.split(",") if x.strip()]
    if "rome" not in names or any(n not in SHAPE_ROWS for n in names):
        raise ConfigError(f"bad rows {args.rows!r}", where="--rows",
                          fix=f"a comma-separated subset of {list(SHAPE_ROWS)} that includes rome (the ratios' base)")
    if args.shape not in SHAPES:
        raise ConfigError(f"unknown shape {args.shape!r}", where="--shape", fix=f"use one of {sorted(SHAPES)}")
    run_id = f"{socket.gethostname()}-{os.getpid()}-{time.time():.0f}"  # rows timed in this run share it
    if args.ort_k < 1:
        raise ConfigError(f"--ort-k must be >= 1, got {args.ort_k}", where="--ort-k",
                          fix="pass 1 (one delta per call, the lean default) up to the search's K (17)")
    ort = {"bits": args.ort_bits, "head_bits": args.ort_head_bits or args.ort_bits, "program_K": args.ort_k}
    rows_dir = rows_dir_for(args.out)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / args.shape
        _spawn(_build_child, (args.shape, str(folder)), "build")  # the parent never holds a model
        qfolder = Path(tmp) / f"{args.shape}-w8a16"
        _spawn(_quantize_child, (str(folder), args.layer, str(qfolder)), "quantize")
        sizes = {k: sum(f.stat().st_size for f in p.glob("*.safetensors")) / 2**20 for k, p in (("fp32", folder), ("w8a16", qfolder))}
        ckpt = {"fp32": folder, "w8a16": qfolder}
        rows = {}
        for row in names:
            ident = row_identity(args.shape, row, args.layer, args.steps, args.malloc, ort)
            if (got := saved_row(rows_dir, ident)) is not None:
                log.log(NOTICE, "bench-shape row %s: reusing %s (timed in run %s)", row, rows_dir, got.get("run_id"))
                rows[row] = got
                continue
            log.log(NOTICE, "bench-shape row %s (%d steps)...", row, args.steps)
            if row == ORT_ROW:
                rows[row] = run_ort_row(folder, args.layer, args.steps, Path(tmp), args.malloc, ort) | {"run_id": run_id}
            else:
                rows[row] = run_child(row, ckpt[SHAPE_ROWS[row]], args.layer, args.steps, Path(tmp), args.malloc) | {
                    "run_id": run_id}
            if rows_dir:
                save_row(rows_dir, ident, rows[row])
        prefix = run_prefix_child(folder, args.layer, args.prefix_k, args.prefix_reps, Path(tmp)) if args.prefix_k else []
    res = {"shape": args.shape, "config": SHAPES[args.shape][1], "layer": args.layer, "steps": args.steps,
           "malloc": args.malloc, "rows": rows,
           "checkpoint_mb": sizes, "ratios": shape_ratios(rows), "prefix": prefix}
    if "mobiedit" in rows:  # the keys of earlier runs' JSON
        res |= {k: res["ratios"]["mobiedit/rome"][v] for k, v in (
            ("rss_ratio_mobiedit_over_rome", "peak_rss"), ("rss_ratio_net_of_runtime", "peak_rss_net_of_runtime"),
            ("wall_ratio_mobiedit_over_rome_per_step", "wall_per_step"))}
        if not res["ratios"]["mobiedit/rome"]["same_run"]:
            res["wall_ratio_mobiedit_over_rome_per_step"] = None
    for m, r in rows.items():
        print(f"{m:<14} peak RSS {r['peak_rss_mb']:8.0f} MB (runtime {r['runtime_rss_mb']:.0f} MB before weights, "
              f"{r['after_load_rss_mb']:.0f} MB after load)  {r['wall_per_step_s']:.3f} s/step  "
              f"loss evals {r['loss_evals']}  backward {r['backward_calls']}")
    print(f"checkpoints: fp32 {sizes['fp32']:.0f} MB, w8a16 {sizes['w8a16']:.0f} MB; allocator: "
          + ("mmap threshold fixed at 1 MiB (peak RSS = live memory)" if args.malloc == "fixed"
             else "glibc's own threshold (peak RSS includes freed blocks it keeps)"))
    for pair, r in res["ratios"].items():
        wall = (f"per-step wall ratio {r['wall_per_step']:.3f}" if r["same_run"]
                else "no wall ratio (the rows were timed in different runs)")
        print(f"{pair}: peak RSS ratio {r['peak_rss']:.3f} (net of the Python runtime {r['peak_rss_net_of_runtime']:.3f}), {wall}")
    for r in prefix:
        print(format_result(r))
    if prefix:
        ref = prefix[0]["median"]["t_prefix_s"]
        print("prefix step time / fp32 eager's: " + ", ".join(f"{r['quant']} {r['median']['t_prefix_s'] / ref:.2f}"
                                                          for r in prefix))
    if args.out:
        atomic_write_text(args.out, json.dumps(res, indent=1))
    return 0


def register(sub) -> None:
    sp = sub.add_parser("bench-shape", help="time and peak memory of one edit at a real model's shape")
    sp.add_argument("--shape", default="qwen2-0.5b", help=f"one of {sorted(SHAPES)}")
    sp.add_argument("--layer", type=int, default=5, help="edit layer")
    sp.add_argument("--steps", type=int, default=10, help="search steps timed (a random model has no success)")
    sp.add_argument("--prefix-k", type=int, default=4,
                    help="deltas per timed prefix/full graph call (0 skips the prefix measurement)")
    sp.add_argument("--prefix-reps", type=int, default=2, help="timed calls per graph (median)")
    sp.add_argument("--rows", default="rome,rome-lean,mobiedit",
                    help=f"comma-separated rows from {list(SHAPE_ROWS)} (rome is the ratios' base)")
    sp.add_argument("--malloc", choices=("fixed", "glibc"), default="fixed",
                    help="fixed (default): every child fixes glibc's mmap threshold at 1 MiB, so freed tensors leave "
                    "the RSS (peak RSS = live memory; each large allocation then costs an mmap, slowing steps); "
                    "glibc: the allocator's own dynamic threshold (faster steps, peak RSS includes freed blocks "
                    "glibc keeps). Time from one run, memory from the other, or read both")
    sp.add_argument("--ort-bits", type=int, choices=(4, 8), default=4,
                    help=f"{ORT_ROW}: weight bits of its ONNX Runtime programs (MatMulNBits, blocks of 32)")
    sp.add_argument("--ort-head-bits", type=int, choices=(0, 4, 8), default=0,
                    help=f"{ORT_ROW}: the LM head's weight bits (0: --ort-bits)")
    sp.add_argument("--ort-k", type=int, default=1,
                    help=f"{ORT_ROW}: deltas per edit-program call (its logits are K x targets x vocabulary)")
    sp.add_argument("--out", help="JSON output file; each finished row is also kept in OUT.rows/ and a rerun "
                    "with the same shape, layer and steps reuses it (memory figures; wall ratios only within one run)")
    sp.set_defaults(fn=cmd_bench_shape)
