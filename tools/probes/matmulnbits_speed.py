"""One MatMul of the 0.5B shape's MLP (896 x 4,864) on ONNX Runtime, one thread: fp32 against
``MatMulNBits`` at 4 and 8 bits (blocks of 32, symmetric) and each accuracy level — what the
``nbits`` edit programs' kernels cost per call, and how far each rounds the product.

    python tools/probes/matmulnbits_speed.py [--rows 17,170,680]

Prints per row count M: ms per call (median of ~1 s of calls) and the max error relative to the
largest |y| of the fp32 product. Level 0 = the attribute left out (fp32 compute), 4 = int8 compute
(``QuantizeConfig.nbits_compute``).
"""
from __future__ import annotations

import argparse
import logging
import statistics
import time


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rows", default="17,170,680", help="row counts M of the activation [M, 896]")
    a = p.parse_args(argv)
    import numpy as np
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization.matmul_nbits_quantizer").setLevel(logging.WARNING)
    K, N = 896, 4864
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((K, N)) * 0.02).astype(np.float32)

    def model():
        g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["M", K])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["M", N])],
                              [numpy_helper.from_array(w, "w")])
        return helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])

    so = ort.SessionOptions()
    so.intra_op_num_threads = so.inter_op_num_threads = 1

    def bench(m, x):
        s = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        y, times, t_end = s.run(None, {"x": x})[0], [], time.perf_counter() + 1.0
        while time.perf_counter() < t_end:
            t0 = time.perf_counter()
            s.run(None, {"x": x})
            times.append(time.perf_counter() - t0)
        ref = x @ w
        return statistics.median(times) * 1e3, float(np.abs(y - ref).max() / np.abs(ref).max())

    variants = [("fp32", None, None)] + [(f"int{b} level {lv}", b, lv) for b in (4, 8) for lv in (0, 4)]
    for M in (int(m) for m in a.rows.split(",")):
        x = rng.standard_normal((M, K)).astype(np.float32)
        cells = []
        for name, bits, level in variants:
            m = model()
            if bits:
                q = MatMulNBitsQuantizer(m, bits=bits, block_size=32, is_symmetric=True, accuracy_level=level or None)
                q.process()
                m = q.model.model
            ms, err = bench(m, x)
            cells.append(f"{name}: {ms:.2f} ms (err {err:.4f})")
        print(f"M={M}: " + "; ".join(cells), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
