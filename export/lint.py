"""Graph lint: reject programs an NPU compiler would reject, listing the offending nodes.

Rules (each finding names the rule, the node and why):

* ``dynamic-shape``: a symbolic dimension anywhere, or a data-dependent-shape op (nonzero,
  masked_select, unique, boolean-mask indexing, ``.item()``).
* ``control-flow``: higher-order control flow (cond / while_loop / map / scan) or a call into a
  nested graph.
* ``float-compute`` (quantized programs only): a matmul-class op (linear / mm / bmm / matmul /
  conv / Gemm / MatMul) whose weight operand is a float parameter, i.e. not produced by
  dequantizing an integer tensor, outside the float islands. With ``strict_activations`` a
  matmul of two float activations (attention) is reported too — an NPU runs those quantized or
  in fp16, while XNNPACK runs them in fp32.

:func:`lint_exported` checks a ``torch.export`` program (both runtimes, before lowering);
:func:`lint_onnx` checks an ONNX graph (after QDQ: MatMul/Gemm inputs must come from
``DequantizeLinear`` outside the islands). Island membership comes from the module path of each
node (``nn_module_stack`` / ONNX ``name_scopes``), with the programs' root prefix removed.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

import torch

from mobiedit.errors import LintError

from .graphs import ROOT

_MATMUL = {"linear", "mm", "bmm", "matmul", "addmm", "baddbmm", "conv1d", "conv2d", "convolution", "_convolution"}
_DYNAMIC = {"nonzero", "masked_select", "unique", "_unique2", "unique_consecutive", "_local_scalar_dense",
            "item", "repeat_interleave", "nonzero_static"}
_CONTROL = {"cond", "while_loop", "map", "map_impl", "scan", "associative_scan", "invoke_subgraph"}
#: ops that only move / reshape / cast data: followed when tracing a weight operand to its source
_PASS = {"t", "transpose", "permute", "view", "reshape", "_unsafe_view", "expand", "unsqueeze", "squeeze",
         "contiguous", "clone", "alias", "detach", "numpy_T", "_to_copy", "to", "mul", "div", "sub",
         "dequantize_affine", "dequantize_per_channel", "dequantize_per_tensor", "dequantize_per_channel_group"}


@dataclass(frozen=True)
class Finding:
    rule: str
    node: str
    detail: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.node}: {self.detail}"


@dataclass(frozen=True)
class LintConfig:
    """quantized: check ``float-compute``. islands: module paths (HF names, e.g.
    ``lm_head``) whose compute may stay float. strict_activations: also flag float
    activation×activation matmuls. island_nodes: ONNX node names kept float on purpose (the QDQ
    step's exclusions; quantization tools drop the module-path metadata of nodes they copy)."""

    quantized: bool = False
    islands: frozenset[str] = field(default_factory=frozenset)
    strict_activations: bool = False
    island_nodes: frozenset[str] = field(default_factory=frozenset)


def _op_name(target) -> str:
    name = getattr(target, "__name__", str(target))
    return name.split(".")[0]


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path = list(stack.values())[-1][0]
    return _strip_root(path)


def _strip_root(path: str) -> str:
    path = path.replace("L['self'].", "").replace("L__self__.", "")
    return path[len(ROOT) + 1:] if path.startswith(ROOT + ".") else path


def in_island(path: str, islands: frozenset[str] | set[str]) -> bool:
    return any(path == i or path.startswith(i + ".") for i in islands)


def _is_symbolic(val) -> bool:
    if isinstance(val, torch.SymInt):
        return True
    shape = getattr(val, "shape", None)
    return shape is not None and any(isinstance(s, torch.SymInt) for s in shape)


def _weight_source(ep: torch.export.ExportedProgram, node) -> tuple[str, torch.dtype | None]:
    """Classify an operand: ("param", dtype) when every path back through data-movement / dequant
    ops ends at a parameter, buffer or constant (dtype: an integer dtype seen on the way, i.e. a
    dequantized weight, else float32); ("activation", None) when any path reaches a program input
    or a compute op."""
    sig = ep.graph_signature
    consts = {**sig.inputs_to_parameters, **sig.inputs_to_buffers,
              **getattr(sig, "inputs_to_lifted_tensor_constants", {})}
    seen: list[torch.dtype] = []
    frontier = [node]
    while frontier:
        n = frontier.pop()
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            seen.append(val.dtype)
        if n.op == "get_attr" or (n.op == "placeholder" and n.name in consts):
            continue
        if n.op == "call_function" and _op_name(n.target) in _PASS:
            frontier.extend(a for a in n.args if isinstance(a, torch.fx.Node))
            continue
        return "activation", None
    ints = [d for d in seen if not d.is_floating_point and d != torch.bool]
    return "param", (ints[0] if ints else torch.float32)


#: index of the weight operand of ops that have one
_WEIGHT_ARG = {"linear": 1, "addmm": 2, "conv1d": 1, "conv2d": 1, "convolution": 1, "_convolution": 1}


def lint_exported(ep: torch.export.ExportedProgram, cfg: LintConfig) -> list[Finding]:
    """All findings for a captured program (empty = clean)."""
    out: list[Finding] = []
    if ep.range_constraints:
        out.append(Finding("dynamic-shape", "<program>", f"symbolic dims {sorted(map(str, ep.range_constraints))}"))
    for n in ep.graph.nodes:
        if n.op == "call_module":
            out.append(Finding("control-flow", n.name, f"calls nested graph {n.target}"))
            continue
        if n.op not in ("call_function", "placeholder"):
            continue
        if _is_symbolic(n.meta.get("val")):
            out.append(Finding("dynamic-shape", n.name, "symbolic shape"))
        if n.op != "call_function":
            continue
        op = _op_name(n.target)
        if op in _CONTROL or "higher_order" in str(n.target):
            out.append(Finding("control-flow", n.name, f"{n.target}"))
        elif op in _DYNAMIC:
            out.append(Finding("dynamic-shape", n.name, f"{op} has a data-dependent output shape"))
        elif op == "index" and any(isinstance(a, torch.fx.Node) and getattr(a.meta.get("val"), "dtype", None) == torch.bool
                                   for a in (n.args[1] if len(n.args) > 1 else []) or []):
            out.append(Finding("dynamic-shape", n.name, "boolean-mask indexing"))
        elif cfg.quantized and op in _MATMUL:
            out.extend(_float_compute(ep, n, op, cfg))
    return out


def _float_compute(ep, n: torch.fx.Node, op: str, cfg: LintConfig) -> list[Finding]:
    path = _module_path(n)
    if in_island(path, cfg.islands):
        return []
    args = [a for a in n.args if isinstance(a, torch.fx.Node)]
    if op in _WEIGHT_ARG:
        idx = _WEIGHT_ARG[op]
        operands = [n.args[idx]] if len(n.args) > idx and isinstance(n.args[idx], torch.fx.Node) else []
    else:
        operands = args[-2:] if op == "baddbmm" else args[:2]
    sources = [_weight_source(ep, a) for a in operands]
    if any(kind == "param" and dtype is not None and dtype.is_floating_point for kind, dtype in sources):
        return [Finding("float-compute", n.name, f"{op} with float weights in {path or '<root>'}")]
    if cfg.strict_activations and op not in _WEIGHT_ARG and sources and all(k == "activation" for k, _ in sources):
        return [Finding("float-compute", n.name, f"{op} of two float activations in {path or '<root>'}")]
    return []


def lint_onnx(model, cfg: LintConfig) -> list[Finding]:
    """Findings for an ONNX ModelProto: symbolic dims of graph inputs/outputs, control-flow ops,
    and (quantized) MatMul/Gemm/Conv nodes with a float input that is not a DequantizeLinear output."""
    out: list[Finding] = []
    for vi in list(model.graph.input) + list(model.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if any(d.dim_param or not d.HasField("dim_value") for d in dims):
            out.append(Finding("dynamic-shape", vi.name, "symbolic or unknown dimension"))
    producer = {o: n for n in model.graph.node for o in n.output}
    act_only = set(activation_matmuls(model, ("MatMul", "Gemm"))) if cfg.quantized else set()
    for n in model.graph.node:
        if n.op_type in ("If", "Loop", "Scan", "SequenceMap"):
            out.append(Finding("control-flow", n.name, n.op_type))
        elif n.op_type in ("NonZero", "Unique", "Compress"):
            out.append(Finding("dynamic-shape", n.name, f"{n.op_type} has a data-dependent output shape"))
        elif cfg.quantized and n.op_type in ("MatMul", "Gemm", "Conv"):
            path = _onnx_module_path(n)
            if n.name in cfg.island_nodes or in_island(path, cfg.islands):
                continue
            if n.name in act_only and not cfg.strict_activations:
                continue
            srcs = [producer.get(i) for i in n.input[:2]]
            if any(s is None or s.op_type != "DequantizeLinear" for s in srcs):
                out.append(Finding("float-compute", n.name, f"{n.op_type} with a float input in {path or '<root>'}"))
    return out


def activation_matmuls(model, op_types: tuple[str, ...]) -> list[str]:
    """Names of ``op_types`` nodes none of whose inputs is a weight (an initializer, possibly
    reshaped / transposed / cast) — e.g. attention's Q·Kᵀ and P·V."""
    inits = {i.name for i in model.graph.initializer}
    producer = {o: n for n in model.graph.node for o in n.output}

    def is_weight(name: str, depth: int = 0) -> bool:
        if name in inits:
            return True
        n = producer.get(name)
        if n is None or depth > 6:
            return False
        if n.op_type == "Constant":
            return True
        return n.op_type in ("Transpose", "Reshape", "Cast", "Identity", "Unsqueeze", "DequantizeLinear") and \
            all(is_weight(i, depth + 1) for i in n.input[:1] if i)

    return [n.name for n in model.graph.node if n.op_type in op_types and not any(is_weight(i) for i in n.input[:2])]


def _onnx_module_path(node) -> str:
    md = {p.key: p.value for p in node.metadata_props}
    try:
        scopes = ast.literal_eval(md.get("pkg.torch.onnx.name_scopes", "[]"))
    except (ValueError, SyntaxError):
        return ""
    return _strip_root(scopes[-2]) if len(scopes) >= 2 else ""


def raise_if_findings(findings: list[Finding], program: str, limit: int = 20) -> None:
    """Raise :class:`LintError` listing up to ``limit`` findings."""
    if not findings:
        return
    shown = "; ".join(map(str, findings[:limit])) + (f"; … {len(findings) - limit} more" if len(findings) > limit else "")
    raise LintError(f"{len(findings)} finding(s): {shown}", where=f"program '{program}'",
                    fix="remove the dynamic shape / control flow, or quantize the listed ops (or export with "
                        "lint disabled for CPU-only use)")
