"""Lowering: ``torch.export`` → ExecuTorch ``.pte`` (XNNPACK) or ONNX (``torch.onnx.export(dynamo=True)``).

Contract: :func:`export_graph` captures a module with static shapes (non-strict ``torch.export``,
no dynamic dims); :func:`to_pte` lowers several captured programs into ONE ``.pte`` with one
method per program, so weights shared between programs are stored once (XNNPACK keys its weight
blobs by sha256); :func:`to_onnx` writes one ``.onnx`` per program (weights inline below 2 GB,
else in an external-data file beside it). Neither writes anything but the given path.
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from mobiedit.errors import MobiEditError

log = logging.getLogger(__name__)

#: ONNX protobuf limit: larger models must keep their weights in external data
_ONNX_INLINE_LIMIT = 1_800_000_000


class LoweringError(MobiEditError):
    """A program could not be captured or lowered."""


def export_graph(module: torch.nn.Module, args: tuple[torch.Tensor, ...], name: str) -> torch.export.ExportedProgram:
    """``torch.export`` ``module`` at the static shapes of ``args`` (non-strict, no grad)."""
    t0 = time.perf_counter()
    try:
        with torch.no_grad():
            ep = torch.export.export(module, args, strict=False)
    except Exception as e:  # torch raises many types; surface one clear error
        raise LoweringError(f"torch.export failed: {str(e).splitlines()[0][:300]}", where=f"program '{name}'",
                            fix="report this with the model's config.json") from e
    log.info("captured %s in %.1fs (%d nodes)", name, time.perf_counter() - t0, len(ep.graph.nodes))
    return ep


def to_pte(programs: dict[str, torch.export.ExportedProgram], path: Path) -> int:
    """Lower ``programs`` (method name → program) to one ``.pte`` at ``path`` with the XNNPACK
    partitioner. Returns the file size in bytes."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    t0 = time.perf_counter()
    try:
        edge = to_edge_transform_and_lower(programs, partitioner=[XnnpackPartitioner()],
                                           compile_config=EdgeCompileConfig(_check_ir_validity=False))
        buf = edge.to_executorch().buffer
    except Exception as e:
        raise LoweringError(f"ExecuTorch lowering failed: {str(e).splitlines()[0][:300]}",
                            where=f"programs {sorted(programs)}", fix="run with -v and report the log") from e
    path.write_bytes(buf)
    log.info("lowered %s to %s (%.1f MB) in %.1fs", sorted(programs), path.name, len(buf) / 1e6,
             time.perf_counter() - t0)
    return len(buf)


def to_onnx(program: torch.export.ExportedProgram, path: Path, inputs: list[str], outputs: list[str],
            opset: int) -> int:
    """Write ``program`` as ONNX at ``path`` (fp32). Returns the bytes written (all files)."""
    import onnx

    t0 = time.perf_counter()
    try:
        onnx_program = torch.onnx.export(program, (), None, input_names=inputs, output_names=outputs,
                                         opset_version=opset, dynamo=True, optimize=True, verify=False)
        model = onnx_program.model_proto
    except Exception as e:
        raise LoweringError(f"ONNX export failed: {str(e).splitlines()[0][:300]}", where=f"{path.name}",
                            fix="run with -v and report the log") from e
    size = save_onnx(model, path)
    log.info("exported %s (%.1f MB) in %.1fs", path.name, size / 1e6, time.perf_counter() - t0)
    return size


def save_onnx(model, path: Path) -> int:
    """Save an ONNX ModelProto, inline below ~1.8 GB else with ``<name>.data`` beside it."""
    import onnx

    if model.ByteSize() < _ONNX_INLINE_LIMIT:
        onnx.save_model(model, str(path))
        return path.stat().st_size
    data = path.name + ".data"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data)
    return path.stat().st_size + (path.parent / data).stat().st_size
