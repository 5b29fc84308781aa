"""Per-phase RSS of the ``mobiedit-ort`` row's programs under ONNX Runtime session options: what the
lean host's settings (no CPU arena, no memory pattern; weights beside the graph) buy.

    python tools/probes/ort_session_rss.py PROGRAMS_DIR [noarena,nopattern,devinit,noprepack]

PROGRAMS_DIR is what :func:`mobiedit.bench_shape_ort.export_child` writes (prefix.onnx, edit.onnx,
feeds.npz, row.json). Prints VmRSS and VmHWM after each phase: the prefix program loaded, run and
dropped, the edit program loaded and called three times. No torch in this process.
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from mobiedit.bench_shape_ort import edit_inputs, prefix_outputs, read_programs  # noqa: E402
from mobiedit.rss import peak_rss_mb, return_freed_memory, rss_mb  # noqa: E402


def main() -> int:
    return_freed_memory()
    import onnxruntime as ort

    src, opts = Path(sys.argv[1]), set(sys.argv[2].split(",")) if len(sys.argv) > 2 and sys.argv[2] else set()
    spec, feeds = read_programs(src)

    def session(path: Path):
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = 1
        so.log_severity_level = 3
        so.enable_cpu_mem_arena = "noarena" not in opts
        so.enable_mem_pattern = "nopattern" not in opts
        if "devinit" in opts:
            so.add_session_config_entry("session.use_device_allocator_for_initializers", "1")
        if "noprepack" in opts:
            so.add_session_config_entry("session.disable_prepacking", "1")
        return ort.InferenceSession(str(path), sess_options=so, providers=["CPUExecutionProvider"])

    log = [("start", rss_mb(), peak_rss_mb())]
    pre = session(src / spec["programs"]["prefix"]["file"])
    log.append(("prefix loaded", rss_mb(), peak_rss_mb()))
    pout = prefix_outputs(pre, spec, feeds)
    log.append(("prefix ran", rss_mb(), peak_rss_mb()))
    del pre
    log.append(("prefix dropped", rss_mb(), peak_rss_mb()))
    edit = session(src / spec["programs"]["edit"]["file"])
    log.append(("edit loaded", rss_mb(), peak_rss_mb()))
    feed = edit_inputs(spec, pout, feeds)
    t0 = time.perf_counter()
    for i in range(3):
        d = np.random.default_rng(i).standard_normal((spec["program_K"], spec["d"])).astype(np.float32)
        edit.run(["losses"], {**feed, "deltas": d})
    log.append((f"edit x3 ({(time.perf_counter() - t0) / 3:.2f} s/call)", rss_mb(), peak_rss_mb()))
    print(f"options: {sorted(opts) or 'ONNX Runtime defaults'}")
    for what, now, peak in log:
        print(f"{what:<28} RSS {now:7.0f} MB  peak {peak:7.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
