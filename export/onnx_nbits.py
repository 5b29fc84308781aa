"""Weight-only block quantization of an ONNX program for ONNX Runtime's CPU kernels (``nbits``).

Contract: :func:`nbits_quantize` reads an fp32 ``.onnx`` and writes one where every MatMul with a
constant weight outside the float islands is ONNX Runtime's ``MatMulNBits`` (int4 or int8
weights in blocks of ``group_size`` along the input dimension, one fp32 scale per block,
symmetric); the LM head is a MatMul like any other unless it is a float island
(``cfg.quantize_lm_head`` False). The token embedding is not touched here: with
``cfg.quantize_embedding`` the captured model already gathers int8 rows
(:func:`~mobiedit.export.quantize.nbits_source`). Activations stay fp32 (``cfg.nbits_compute``
``fp32``, the default), so the loss differences of
the ZO search are not rounded away (the ``w8`` rule of the torch-level schemes); ONNX Runtime
keeps the packed weights packed (no per-call dequantized copy), so a program's weights take
``bits/8 + 4/group_size`` bytes per parameter in memory as on disk. The weights are saved beside
the graph (``<name>.data``) so that ONNX Runtime maps them rather than parsing and copying them
while a session loads (at the 0.5B shape: 391 vs 642 MB peak while the prefix program loads). The quantizer is
``onnxruntime.quantization``'s :class:`MatMulNBitsQuantizer` (round-to-nearest).
"""
from __future__ import annotations

import logging
import os
from pathlib import Path

from .config import QuantizeConfig
from .onnx_qdq import island_nodes

log = logging.getLogger(__name__)


def gemm_to_matmul(model, base_dir: str = "") -> int:
    """Rewrite every ``Gemm`` with a constant ``B`` (alpha = beta = 1, no transA) as ``MatMul`` with
    a ``[in, out]`` initializer (+ ``Add`` of ``C``), the form :class:`MatMulNBitsQuantizer` takes
    (the exporter emits Gemm for a linear of a 2-D input, e.g. the prefix program's KL read-out).
    In place; returns the count rewritten. ``base_dir``: where external weights' files are."""
    import onnx
    from onnx import helper, numpy_helper

    inits = {i.name: i for i in model.graph.initializer}
    done = 0
    for n in list(model.graph.node):
        attrs = {a.name: helper.get_attribute_value(a) for a in n.attribute}
        if n.op_type != "Gemm" or n.input[1] not in inits or attrs.get("transA", 0) or \
                attrs.get("alpha", 1.0) != 1.0 or attrs.get("beta", 1.0) != 1.0:
            continue
        b = numpy_helper.to_array(inits[n.input[1]], base_dir)
        name = f"{n.input[1]}__kn"
        model.graph.initializer.append(numpy_helper.from_array((b.T if attrs.get("transB", 0) else b).copy(), name))
        has_c = len(n.input) > 2 and n.input[2]
        mm_out = f"{n.output[0]}__mm" if has_c else n.output[0]
        new = [helper.make_node("MatMul", [n.input[0], name], [mm_out], name=f"{n.name}__matmul")]
        if has_c:
            new.append(helper.make_node("Add", [mm_out, n.input[2]], [n.output[0]], name=f"{n.name}__bias"))
        for node in new:
            node.metadata_props.extend(n.metadata_props)
        pos = list(model.graph.node).index(n)
        model.graph.node.remove(n)
        for k, node in enumerate(new):
            model.graph.node.insert(pos + k, node)
        done += 1
    used = {i for n in model.graph.node for i in n.input}
    for init in [i for i in model.graph.initializer if i.name not in used]:
        model.graph.initializer.remove(init)
    if model.ByteSize() < 2**31 - 1 and not _external(model):  # the checker: in-memory models below protobuf's limit
        onnx.checker.check_model(model)
    return done


def _external(model) -> list:
    """``model``'s initializers whose data is in a file, not loaded."""
    from onnx.external_data_helper import uses_external_data

    return [t for t in model.graph.initializer if uses_external_data(t)]


def _relocate(tensors: list, where) -> None:
    """Set each external tensor's ``location`` to ``where(location)``."""
    for t in tensors:
        for e in t.external_data:
            if e.key == "location":
                e.value = where(e.value)


def nbits_quantize(src: Path, dst: Path, islands: set[str], cfg: QuantizeConfig, head: str) -> dict:
    """Write the weight-only version of ``src`` to ``dst``: ``cfg.nbits``-bit weights, the LM head's
    (module path ``head``) ``cfg.nbits_head``-bit when that is set. ``src`` may keep its weights
    beside it (``<name>.data``): they are read one at a time. Returns {"quantized_ops", "excluded",
    "bits", "head_bits", "block", "compute"}; ``excluded``: island nodes kept float."""
    import onnx
    from onnx.external_data_helper import load_external_data_for_model
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    from .config import NBITS_COMPUTE
    from .lower import save_onnx

    ops = ("MatMul",)
    # the graph without its weights: the quantizer reads each weight from the file as it packs it, so
    # the float weights are never all in memory (the export's torch model is, beside this)
    model = onnx.load(str(src), load_external_data=False)
    base = str(src.parent.resolve())
    gemm_to_matmul(model, base)
    _relocate(_external(model), lambda loc: os.path.join(base, loc))  # the quantizer reads them from any cwd
    exclude = island_nodes(model, islands, ops)
    head_bits = cfg.nbits_head or cfg.nbits
    head_nodes = [n for n in island_nodes(model, {head}, ops) if n not in exclude] if head_bits != cfg.nbits else []
    passes = [(cfg.nbits, exclude + head_nodes, None)] + ([(head_bits, [], head_nodes)] if head_nodes else [])
    out = model
    for bits, skip, only in passes:
        quant = MatMulNBitsQuantizer(out, bits=bits, block_size=cfg.group_size, is_symmetric=True,
                                     nodes_to_exclude=skip, nodes_to_include=only, op_types_to_quantize=ops,
                                     quant_axes=(("MatMul", 0),),
                                     accuracy_level=NBITS_COMPUTE[cfg.nbits_compute] or None)
        quant.process()
        out = quant.model.model
    left = _external(out)  # what stays float (islands, norms, the embedding's rows): read in now
    _relocate(left, os.path.basename)
    load_external_data_for_model(out, base)
    n_q = sum(n.op_type == "MatMulNBits" for n in out.graph.node)
    save_onnx(out, dst, external=True)  # the quantizer rewrites the model in place: untouched nodes keep their metadata
    log.info("nbits %s: int%d weights (LM head int%d) in blocks of %d, %s compute, %d MatMulNBits; %d island nodes float",
             dst.name, cfg.nbits, head_bits, cfg.group_size, cfg.nbits_compute, n_q, len(exclude))
    return {"quantized_ops": n_q, "excluded": exclude, "bits": cfg.nbits, "head_bits": head_bits,
            "block": cfg.group_size, "compute": cfg.nbits_compute}
