"""ONNX Runtime sessions as every host in this package opens them (no torch here: the lean
bench host, :mod:`mobiedit.bench_shape_ort`, imports it too).

One thread each (the phone runs the edit loop on one core; the dev box is shared). ``exact_qdq``:
run at ``ORT_ENABLE_BASIC`` so Q/DQ nodes execute as written (the numerics of a 16-bit NPU; the CPU
EP's extended fusions replace 16-bit QDQ MatMuls by lower-precision kernels, which on the
project's own fact LM dropped the edit losses' correlation with fp32 from ~0.999 to ~0.6). ``lean``: no CPU memory arena
and no memory pattern — intermediate buffers are allocated per call and handed back, so a static
program's resident set stays at its weights plus the live activations (at the 0.5B shape the edit
program's calls grew the arena by ~270 MB; ~5 % slower calls).
"""
from __future__ import annotations

from pathlib import Path


def session_options(exact_qdq: bool = False, lean: bool = False):
    """``onnxruntime.SessionOptions`` of one host thread (see the module docstring)."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    if exact_qdq:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    so.log_severity_level = 3
    if lean:
        so.enable_cpu_mem_arena = False
        so.enable_mem_pattern = False
    return so


def open_session(path: str | Path, exact_qdq: bool = False, lean: bool = False):
    """An ``InferenceSession`` of ``path`` on the CPU execution provider with :func:`session_options`."""
    import onnxruntime as ort

    return ort.InferenceSession(str(path), sess_options=session_options(exact_qdq, lean),
                                providers=["CPUExecutionProvider"])
