"""Lowering: ``torch.export`` → ExecuTorch ``.pte`` (XNNPACK) or ONNX (``torch.onnx.export(dynamo=True)``).

Contract: :func:`export_graph` captures a module with static shapes (non-strict ``torch.export``,
no dynamic dims); :func:`to_pte` lowers several captured programs into ONE ``.pte`` with one
method per program, so weights shared between programs are stored once (XNNPACK keys its weight
blobs by sha256); :func:`to_onnx` writes one ``.onnx`` per program (weights inline below 2 GB,
else in an external-data file beside it). Neither writes anything but the given path (and its
``.data``).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path

import torch

from mobiedit.errors import LoweringError

log = logging.getLogger(__name__)

#: ONNX protobuf limit: larger models must keep their weights in external data
_ONNX_INLINE_LIMIT = 1_800_000_000


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


def xnnpack_friendly(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    """Rewrite ops XNNPACK would leave to portable kernels (splitting the graph into
    many delegate calls) into equivalent delegable ones: a last-dim ``mean`` of a rank-2/3 tensor
    (RMSNorm / LayerNorm statistics) becomes a mean over dims (2, 3) of a ``[.., d, 1]`` view —
    XNNPACK's global average pooling. In place on the captured graph (no re-trace, so torchao's
    quantization ops and ``linear`` stay intact for the partitioner). Returns ``ep``."""
    aten = torch.ops.aten
    g = ep.graph_module.graph
    for n in list(g.nodes):
        if n.op != "call_function" or n.target is not aten.mean.dim:
            continue
        x, dims = n.args[0], n.args[1]
        keepdim = n.args[2] if len(n.args) > 2 else n.kwargs.get("keepdim", False)
        val = x.meta.get("val")
        dims = [dims] if isinstance(dims, int) else list(dims or [])
        if val is None or val.dim() not in (2, 3) or n.kwargs.get("dtype") is not None or \
                [d % val.dim() for d in dims] != [val.dim() - 1]:
            continue
        shape = list(val.shape)
        shape4 = [1, shape[0], shape[1], 1] if val.dim() == 2 else shape + [1]
        out_shape = shape[:-1] + ([1] if keepdim else [])
        with g.inserting_before(n):
            v4 = g.call_function(aten.view.default, (x, shape4))
            m = g.call_function(aten.mean.dim, (v4, [2, 3], True))
            out = g.call_function(aten.view.default, (m, out_shape))
        for new in (v4, m, out):
            new.meta = {k: v for k, v in n.meta.items() if k in ("nn_module_stack", "stack_trace", "source_fn_stack")}
        v4.meta["val"] = val.reshape(shape4)
        m.meta["val"] = v4.meta["val"].mean(dim=[2, 3], keepdim=True)
        out.meta["val"] = m.meta["val"].reshape(out_shape)
        n.replace_all_uses_with(out)
        g.erase_node(n)
    ep.graph_module.recompile()
    return ep


def to_pte(programs: dict[str, torch.export.ExportedProgram], path: Path) -> int:
    """Lower ``programs`` (method name → program) to one ``.pte`` at ``path`` with the XNNPACK
    partitioner. Returns the file size in bytes."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import EdgeCompileConfig, to_edge_transform_and_lower

    t0 = time.perf_counter()
    try:
        programs = {name: xnnpack_friendly(ep) for name, ep in programs.items()}
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
            opset: int, external: bool = False) -> int:
    """Write ``program`` as ONNX at ``path`` (fp32). Returns the bytes written (all files).

    The exporter's model is saved as it is (``onnx_ir``): the weights go from the program's own
    tensors to the file, never through a protobuf copy, so lowering needs the model's memory once,
    not twice (at 3B parameters the copy alone is 12 GB). ``external``: the weights always in
    ``<name>.data`` beside the graph (else only above the protobuf limit)."""
    t0 = time.perf_counter()
    try:
        onnx_program = torch.onnx.export(program, (), None, input_names=inputs, opset_version=opset, dynamo=True,
                                         optimize=True, verify=False, verbose=False)  # no "[torch.onnx] ..." lines
        graph = onnx_program.model.graph
        have = [v.name for v in graph.inputs]
        if have != list(inputs):
            raise LoweringError(f"graph inputs {have} differ from {inputs}", where=path.name,
                                fix="report this with the model's config.json")
        name_outputs(graph, outputs)
    except LoweringError:
        raise
    except Exception as e:
        raise LoweringError(f"ONNX export failed: {str(e).splitlines()[0][:300]}", where=f"{path.name}",
                            fix="run with -v and report the log") from e
    size = _save_ir(onnx_program.model, path, external)
    log.info("exported %s (%.1f MB) in %.1fs", path.name, size / 1e6, time.perf_counter() - t0)
    return size


def name_outputs(graph, names: list[str]) -> None:
    """Give the ``onnx_ir`` graph's outputs ``names`` (in order), first moving aside any other value
    that already carries one of them (the exporter names values after FX nodes, e.g. ``cos``;
    asking it for an output called ``cos`` can produce two definitions of one name)."""
    outs = list(graph.outputs)
    if len(outs) != len(names) or len({id(v) for v in outs}) != len(outs):
        raise LoweringError(f"graph outputs {[v.name for v in outs]}, expected {names} (one value each)",
                            where="ONNX export", fix="report this")
    values = list(graph.inputs) + [v for node in graph for v in node.outputs]
    taken = {v.name for v in values} | set(graph.initializers)
    for out, want in zip(outs, names):
        if out.name == want:
            continue
        if want in taken:
            clash = [v for v in values if v.name == want and v is not out]
            if not clash:
                raise LoweringError(f"output name {want!r} is an initializer's", where="ONNX export", fix="report this")
            fresh, k = f"{want}__v", 0
            while fresh in taken:
                k += 1
                fresh = f"{want}__v{k}"
            clash[0].name = fresh
            taken.add(fresh)
        out.name = want
        taken.add(want)


def _save_ir(model, path: Path, external: bool) -> int:
    """Save an ``onnx_ir`` model at ``path``: weights inline below the protobuf limit unless
    ``external``, else in ``<name>.data`` beside it."""
    import onnx_ir as ir

    weights = sum(v.const_value.nbytes for v in model.graph.initializers.values() if v.const_value is not None)
    if not external and weights < _ONNX_INLINE_LIMIT:
        ir.save(model, path)
        return path.stat().st_size
    data = path.parent / (path.name + ".data")
    ir.save(model, path, external_data=data.name)
    return path.stat().st_size + _mode_of_graph(data, path).stat().st_size


def _mode_of_graph(data: Path, graph: Path) -> Path:
    """Give the weights file the graph file's permissions (the writers create it 0600 through a
    temporary file, which an app or another user reading the bundle could not open). Returns ``data``."""
    data.chmod(graph.stat().st_mode & 0o777)
    return data


def save_onnx(model, path: Path, external: bool = False) -> int:
    """Save an ONNX ModelProto, inline below ~1.8 GB else with ``<name>.data`` beside it.
    ``external``: always beside it (ONNX Runtime then maps the weights from the file instead of
    holding the parsed protobuf and a copy while the session loads: the lean hosts' form)."""
    import onnx

    if not external and model.ByteSize() < _ONNX_INLINE_LIMIT:
        onnx.save_model(model, str(path))
        return path.stat().st_size
    data = path.name + ".data"
    (path.parent / data).unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True, location=data)
    return path.stat().st_size + _mode_of_graph(path.parent / data, path).stat().st_size
