"""Static QDQ quantization of an ONNX program for ORT's QNN EP: uint16 activations, int8 weights.

Contract: :func:`qdq_quantize` reads an fp32 ``.onnx``, calibrates activation ranges (MinMax) on
the given feeds, and writes a QDQ model where only ``cfg.qdq_ops`` nodes (default MatMul / Gemm)
outside the float islands get Q/DQ pairs — on this codebase's edit programs a full QDQ (every op)
erased the loss differences between deltas (correlation 0.000), MatMul/Gemm-only kept them.
Weights are per-channel symmetric int8; 16-bit activations bump the model to opset 21.
"""
from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from .config import QuantizeConfig
from .lint import _onnx_module_path, activation_matmuls, in_island

log = logging.getLogger(__name__)


class _Feeds:
    """``onnxruntime.quantization.CalibrationDataReader`` over a list of input dicts."""

    def __init__(self, feeds: list[dict[str, np.ndarray]]) -> None:
        self._it = iter(feeds)

    def get_next(self):
        return next(self._it, None)

    def rewind(self) -> None:  # some ORT versions call it
        pass


def island_nodes(model, islands: set[str], op_types: tuple[str, ...]) -> list[str]:
    """Names of ``op_types`` nodes whose module path lies in a float island."""
    return [n.name for n in model.graph.node if n.op_type in op_types and in_island(_onnx_module_path(n), islands)]


def _restore_metadata(src_model, dst: Path) -> None:
    """Copy each node's metadata (module path scopes) from the fp32 model to the nodes the
    quantizer copied by name, so :func:`~mobiedit.export.lint.lint_onnx` finds the islands."""
    import onnx

    from .lower import save_onnx

    meta = {n.name: list(n.metadata_props) for n in src_model.graph.node if n.metadata_props}
    model = onnx.load(str(dst))
    for node in model.graph.node:
        if node.name in meta and not node.metadata_props:
            node.metadata_props.extend(meta[node.name])
    save_onnx(model, dst)


def qdq_quantize(src: Path, dst: Path, feeds: list[dict[str, np.ndarray]], islands: set[str],
                 cfg: QuantizeConfig) -> dict[str, int]:
    """Write the QDQ version of ``src`` to ``dst``. Returns {"quantized_ops", "excluded_ops"}."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize
    from onnxruntime.quantization.execution_providers.qnn import get_qnn_qdq_config

    model = onnx.load(str(src))
    exclude = island_nodes(model, islands, cfg.qdq_ops)
    if not cfg.qdq_activation_matmuls:
        exclude += [n for n in activation_matmuls(model, cfg.qdq_ops) if n not in exclude]
    ops = [n for n in model.graph.node if n.op_type in cfg.qdq_ops]
    qcfg = get_qnn_qdq_config(str(src), _Feeds(feeds), activation_type=QuantType.QUInt16,
                              weight_type=QuantType.QInt8, per_channel=True,
                              op_types_to_quantize=list(cfg.qdq_ops), nodes_to_exclude=exclude)
    qcfg.nodes_to_exclude = exclude
    qcfg.use_external_data_format = (src.parent / (src.name + ".data")).exists()  # > 2 GB models
    quantize(str(src), str(dst), qcfg)
    _restore_metadata(model, dst)
    log.info("QDQ a16w8 %s: %d %s nodes quantized, %d float (islands)", dst.name, len(ops) - len(exclude),
             "/".join(cfg.qdq_ops), len(exclude))
    return {"quantized_ops": len(ops) - len(exclude), "excluded_ops": len(exclude), "excluded": exclude}
