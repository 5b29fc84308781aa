"""The bench-shape row ``mobiedit-ort``: MobiEdit's search on ONNX Runtime programs whose weights
stay block-quantized in memory (a bundle's ``nbits`` prefix and edit programs,
:mod:`mobiedit.export.onnx_nbits`), in a process without torch — ONNX Runtime, numpy and the
native engine (``mobiedit._native``, the search driver the app runs), the way the app hosts an edit.

Two children per row. The export child (torch) lowers the shape's random model to the two
programs with the exporter's own stages (:mod:`mobiedit.export.pipeline`; edit shapes fitted to
the one request, no key statistics, as the other shape rows) and writes the request's packed feeds
(``feeds.npz``, no pickles). The measured child imports no torch (it says so in its result): it
runs the prefix program once, drops it, loads the edit program and steps the engine for exactly
``steps`` steps, each step's K deltas run ``program_K`` at a time. Peak RSS is its own ``VmHWM``.
"""
from __future__ import annotations

import json
import sys
import time
from importlib import import_module
from pathlib import Path

ORT_ROW = "mobiedit-ort"
FEEDS, SPEC = "feeds.npz", "row.json"


def export_child(folder: str, layer: int, bits: int, head_bits: int, program_k: int, out: str) -> None:
    """(A spawned child, torch.) Write ``prefix.onnx``, ``edit.onnx``, :data:`FEEDS` and
    :data:`SPEC` to ``out`` for the first bundled request on the model at ``folder``: ``bits``-bit
    weights, the LM head's ``head_bits`` (0: ``bits``), ``program_k`` deltas per edit-program call."""
    import numpy as np
    import torch

    torch.set_num_threads(1)
    from .quiet import quiet_libraries

    quiet_libraries()
    from .editing.context import build_edit_inputs
    from .export.config import EditSetup, EditShapes, ExportConfig, LowerConfig, QuantizeConfig
    from .export.packing import edit_feed, pack_edit
    from .export.pipeline import build_modules, capture, fit_edit_shapes, lower_programs, prepare, program_models
    from .export.runtime import OnnxProgram
    from .requests import bundled_path, load_requests

    req = load_requests(bundled_path("counterfact-edit-1k.json"))[0]
    cfg = ExportConfig(edit_shapes=EditShapes(K=program_k, rows=EditShapes().rows, suffix=1, prefix=1, targets=1, kl=1),
                       quant=QuantizeConfig(scheme="fp32", edit_scheme="nbits", nbits=bits, nbits_head=head_bits,
                                            quantize_lm_head=True,
                                            quantize_embedding=True, check_draws=0),
                       lower=LowerConfig(runtime="onnxruntime"), edit=EditSetup(layer=layer, mom2=False))
    prep = prepare(folder, cfg)
    cfg = fit_edit_shapes(prep, cfg, [req])  # the request's own sizes: no padding beyond them
    roles = ("prefix", "edit")
    modules = build_modules(prep, program_models(prep, cfg), cfg, roles)
    dest = Path(out)
    dest.mkdir(parents=True, exist_ok=True)
    programs = lower_programs(capture(modules, prep, cfg), modules, dest, prep, cfg)
    packed = pack_edit(build_edit_inputs(prep.lm.tokenizer, req, prep.templates, cfg.edit.objective),
                       cfg.edit_shapes, cfg.edit.objective)
    slots = {"slot_u": torch.zeros(cfg.inference.slots, prep.dims.d_out),
             "slot_w": torch.zeros(cfg.inference.slots, prep.dims.d_in)}
    pre = {**packed.prefix_feed, **slots}
    spec = programs["prefix"]
    # run here once for edit_feed's wd_scale (the objective's decay coefficient, computed by torch-side
    # code); the measured child runs the prefix program again, as its own state and memory
    pout = OnnxProgram(dest / spec["file"], spec["inputs"], spec["outputs"]).run(pre)
    feeds = {f"prefix/{k}": v for k, v in pre.items()} | {f"edit/{k}": v for k, v in edit_feed(packed, pout).items()}
    np.savez(dest / FEEDS, **{k: v.detach().numpy() for k, v in feeds.items()})
    (dest / SPEC).write_text(json.dumps({"programs": programs, "program_K": program_k, "bits": bits, "head_bits": head_bits or bits,
                                         "d": prep.dims.d_out, "edit_shapes": cfg.edit_shapes.__dict__,
                                         "templates": len(prep.templates)}))


def read_programs(src: Path) -> tuple[dict, dict]:
    """(spec, feeds) the export child wrote to ``src`` (:data:`SPEC`, :data:`FEEDS`; no pickles)."""
    import numpy as np

    spec = json.loads((src / SPEC).read_text())
    with np.load(src / FEEDS, allow_pickle=False) as z:
        return spec, {k: z[k] for k in z.files}


def prefix_outputs(session, spec: dict, feeds: dict) -> dict:
    """The prefix program's outputs by name, run once on the request's feeds."""
    names = spec["programs"]["prefix"]["outputs"]
    return dict(zip(names, session.run(names, {k.split("/", 1)[1]: v for k, v in feeds.items()
                                              if k.startswith("prefix/")})))


def edit_inputs(spec: dict, pout: dict, feeds: dict) -> dict:
    """The edit program's inputs but ``deltas``: its state from this process's own prefix run
    (``pout``), the rest from the feeds."""
    return {n: pout[n] if n in pout else feeds[f"edit/{n}"] for n in spec["programs"]["edit"]["inputs"] if n != "deltas"}


def measured_child(programs_dir: str, zo: dict, steps: int, out: str, malloc: str = "fixed") -> None:
    """(A spawned child, no torch.) One search of ``steps`` steps with the native engine over the
    edit program; writes the row's figures to ``out``."""
    import numpy as np

    from .export.ort_session import open_session
    from .rss import peak_rss_mb, return_freed_memory, rss_mb
    from .zo.config import ZOConfig
    from .zo.native_backend import run_native

    malloc_tuned = return_freed_memory() if malloc == "fixed" else False  # as every row's child
    import_module("onnxruntime")  # the runtime's own RSS belongs to "before weights"
    base = peak_rss_mb()
    src = Path(programs_dir)
    spec, feeds = read_programs(src)
    t0 = time.perf_counter()
    prefix = open_session(src / spec["programs"]["prefix"]["file"], lean=True)
    pout = prefix_outputs(prefix, spec, feeds)
    after_prefix = peak_rss_mb()
    del prefix  # run once per edit: its weights leave before the loop's program loads
    t_prefix = time.perf_counter() - t0
    edit = open_session(src / spec["programs"]["edit"]["file"], lean=True)
    loaded = rss_mb()
    feed = edit_inputs(spec, pout, feeds)
    K, d = spec["program_K"], spec["d"]

    def forward(D: np.ndarray) -> np.ndarray:  # the loop's hot path: K deltas per program call
        losses = np.empty(D.shape[0], np.float32)
        for i in range(0, D.shape[0], K):
            n = min(K, D.shape[0] - i)
            if n < K:  # only a last, partial batch is zero-padded
                feed["deltas"] = np.zeros((K, d), np.float32)
                feed["deltas"][:n] = D[i:i + n]
            else:
                feed["deltas"] = D[i:i + K]
            losses[i:i + n] = edit.run(["losses"], feed)[0][:n]
        return losses

    cfg = ZOConfig(**zo)
    t0 = time.perf_counter()
    res = run_native(forward, None, np.zeros(d, np.float32), cfg)
    wall = time.perf_counter() - t0
    peak = peak_rss_mb()
    Path(out).write_text(json.dumps({
        "status": res.status.value, "loss_evals": res.evals, "backward_calls": 0, "steps": res.steps,
        "wall_per_step_s": wall / steps, "prefix_s": t_prefix, "peak_rss_mb": peak, "runtime_rss_mb": base,
        "after_prefix_peak_rss_mb": after_prefix, "after_load_rss_mb": loaded, "peak_minus_runtime_mb": peak - base,
        "malloc_mmap_threshold_1mib": malloc_tuned, "torch_in_process": "torch" in sys.modules,
        "program_K": K, "bits": spec["bits"], "head_bits": spec["head_bits"], "edit_shapes": spec["edit_shapes"], "templates": spec["templates"],
        "program_bytes": {r: sum(f.stat().st_size for f in (src / p["file"], src / (p["file"] + ".data"))
                                 if f.exists()) for r, p in spec["programs"].items()}}))
