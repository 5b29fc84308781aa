"""The ``nbits`` edit scheme (ONNX Runtime MatMulNBits weights, int8 embedding rows, fp32
activations) and the bench-shape row that hosts its programs without torch (issue 17's memory line)."""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

from mobiedit.errors import ConfigError
from mobiedit.recipes import FZOO
from mobiedit.export.config import EditSetup, ExportConfig, LowerConfig, QuantizeConfig


def _cfg(bits: int, head: int = 0, **lower) -> ExportConfig:
    return ExportConfig(quant=QuantizeConfig(scheme="fp32", edit_scheme="nbits", nbits=bits, nbits_head=head,
                                             quantize_lm_head=True, quantize_embedding=True, group_size=16),
                        lower=LowerConfig(**{"runtime": "onnxruntime", **lower}), edit=EditSetup(layer=1, mom2=False))


def test_bad_nbits_settings_name_their_field():
    with pytest.raises(ConfigError, match="ExportConfig.quant.nbits"):
        QuantizeConfig(edit_scheme="nbits", nbits=3)
    with pytest.raises(ConfigError, match="ExportConfig.quant.nbits_head"):
        QuantizeConfig(edit_scheme="nbits", nbits_head=2)
    with pytest.raises(ConfigError, match="ExportConfig.quant.group_size"):
        QuantizeConfig(edit_scheme="nbits", group_size=24)
    with pytest.raises(ConfigError, match="ExportConfig.quant.nbits_compute") as e:
        QuantizeConfig(edit_scheme="nbits", nbits_compute="int4")
    assert "int8" in e.value.fix
    with pytest.raises(ConfigError, match="ExportConfig.quant.edit_scheme") as e:
        _cfg(4, runtime="executorch")
    assert "onnxruntime" in e.value.fix


def test_gemm_becomes_a_matmul_the_quantizer_takes():
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from mobiedit.export.onnx_nbits import gemm_to_matmul

    rng = np.random.default_rng(0)
    w, b = rng.standard_normal((5, 3)).astype(np.float32), rng.standard_normal(5).astype(np.float32)
    graph = helper.make_graph([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1, name="g")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    x = rng.standard_normal((2, 3)).astype(np.float32)
    run = lambda m: ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    before = run(model)
    assert gemm_to_matmul(model) == 1
    assert [n.op_type for n in model.graph.node] == ["MatMul", "Add"]
    assert [i.name for i in model.graph.initializer] == ["b", "w__kn"]  # the [out, in] copy is gone
    np.testing.assert_allclose(run(model), before, rtol=1e-6, atol=1e-6)
    assert onnx.checker.check_model(model) is None


@pytest.mark.parametrize("compute,level", [("fp32", None), ("int8", 4)])
def test_nbits_compute_is_the_kernels_accuracy_level(tmp_path, compute, level):
    """int8 compute = ONNX Runtime's accuracy level 4 on every MatMulNBits; fp32 leaves the attribute
    out (the kernel's float default); both give the float product to the weights' rounding."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from mobiedit.export.onnx_nbits import nbits_quantize

    rng = np.random.default_rng(1)
    w = (rng.standard_normal((64, 48)) * 0.1).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"], name="m")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 48])],
                              [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), str(tmp_path / "f.onnx"))
    cfg = QuantizeConfig(scheme="fp32", edit_scheme="nbits", nbits=8, group_size=32, nbits_compute=compute)
    info = nbits_quantize(tmp_path / "f.onnx", tmp_path / "q.onnx", set(), cfg, "lm_head")
    assert info["quantized_ops"] == 1 and info["compute"] == compute
    node, = onnx.load(str(tmp_path / "q.onnx")).graph.node
    assert node.op_type == "MatMulNBits"
    assert {a.name: a.i for a in node.attribute}.get("accuracy_level") == level
    x = rng.standard_normal((4, 64)).astype(np.float32)
    y = ort.InferenceSession(str(tmp_path / "q.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
    ref = x @ w
    assert np.abs(y - ref).max() < 0.02 * np.abs(ref).max()


def test_nbits_reads_external_weights_one_at_a_time(tmp_path, monkeypatch):
    """A source whose weights are in a file beside it (how the exporter lowers them) quantizes the
    same as one that holds them inline, from any working directory; what stays float is read in."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper, numpy_helper

    from mobiedit.export.onnx_nbits import nbits_quantize

    rng = np.random.default_rng(2)
    w, g = (rng.standard_normal((64, 48)) * 0.1).astype(np.float32), rng.standard_normal(48).astype(np.float32)
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["h"], name="m"),
                               helper.make_node("Mul", ["h", "g"], ["y"], name="scale")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 48])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(g, "g")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    onnx.save(model, str(tmp_path / "a" / "f.onnx"))
    onnx.save_model(model, str(tmp_path / "b" / "f.onnx"), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="f.onnx.data", size_threshold=0)
    monkeypatch.chdir(tmp_path)
    cfg = QuantizeConfig(scheme="fp32", edit_scheme="nbits", nbits=4, group_size=32)
    x = rng.standard_normal((4, 64)).astype(np.float32)
    ys = []
    for d in ("a", "b"):
        info = nbits_quantize(tmp_path / d / "f.onnx", tmp_path / d / "q.onnx", set(), cfg, "lm_head")
        assert info["quantized_ops"] == 1
        ys.append(ort.InferenceSession(str(tmp_path / d / "q.onnx"), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0])
    np.testing.assert_array_equal(ys[0], ys[1])
    inits = onnx.load(str(tmp_path / "b" / "q.onnx"), load_external_data=False).graph.initializer
    assert "w" not in {i.name for i in inits} and "g" in {i.name for i in inits}  # the float weight left, the scale kept


def test_an_edit_program_that_reads_noise_is_named_at_export():
    from mobiedit.export.calibration import SIGNAL_FLOOR, weak_signal

    assert weak_signal({"network_min": 0.85}, "nbits") is None  # int4 on SmolLM2: still edits
    msg = weak_signal({"network_min": -0.5}, "nbits")
    assert msg and "-0.500" in msg and str(SIGNAL_FLOOR) in msg and "fp32 compute" in msg and "--nbits 8" in msg
    qdq = weak_signal({"network_min": 0.48, "h": 0.2}, "qdq_a16w8")  # SmolLM2's QDQ edit program at its recipe's h
    assert "--edit-quant nbits --nbits 8" in qdq and "h 0.2" in qdq


@pytest.mark.parametrize("tiny_model_dir", ["llama"], indirect=True)
def test_nbits_programs_keep_packed_weights_and_the_loss_signal(tiny_model_dir, tmp_path):
    import onnx
    import torch

    from export_kit import REQUEST
    from mobiedit.editing.context import build_edit_inputs
    from mobiedit.export.calibration import edit_correlation
    from mobiedit.export.packing import edit_feed, pack_edit
    from mobiedit.export.pipeline import build_modules, capture, lower_programs, prepare, program_models
    from mobiedit.export.runtime import EagerProgram, open_program

    corr = {}
    for bits, head in ((8, 0), (4, 8)):  # the second with its LM head at 8 bits
        cfg = _cfg(bits, head)
        prep = prepare(tiny_model_dir, cfg)
        modules = build_modules(prep, program_models(prep, cfg), cfg, ("prefix", "edit"))
        folder = tmp_path / f"b{bits}"
        folder.mkdir()
        specs = lower_programs(capture(modules, prep, cfg), modules, folder, prep, cfg)
        ops = {r: [n.op_type for n in onnx.load(str(folder / s["file"])).graph.node] for r, s in specs.items()}
        assert ops["edit"].count("MatMulNBits") > 0 and ops["prefix"].count("MatMulNBits") > 0
        node_bits = {n.name: {a.name: a.i for a in n.attribute}.get("bits")
                     for n in onnx.load(str(folder / specs["edit"]["file"])).graph.node if n.op_type == "MatMulNBits"}
        assert set(node_bits.values()) == {bits, head or bits}, node_bits
        if head:  # the LM head alone (one read-out MatMul in the edit program)
            assert list(node_bits.values()).count(head) == 1, node_bits
        for spec in specs.values():  # the weights beside each graph, readable as the graph is
            data = folder / (spec["file"] + ".data")
            assert data.stat().st_mode & 0o777 == (folder / spec["file"]).stat().st_mode & 0o777
        for role, spec in specs.items():  # every constant weight packed but the edit layer's MLP output (an island)
            m = onnx.load(str(folder / spec["file"]))
            big = {i.name for i in m.graph.initializer if i.data_type == onnx.TensorProto.FLOAT and
                   len(i.dims) == 2 and min(i.dims) >= 16 and not i.name.endswith("_scales")}
            users = [n for n in m.graph.node if big & set(n.input)]
            paths = [" ".join(p.value for p in n.metadata_props if p.key == "namespace") for n in users]
            assert len(big) <= 1 and all("layers.1:" in p and "mlp" in p for p in paths), (role, big, paths)
        packed = pack_edit(build_edit_inputs(prep.lm.tokenizer, REQUEST, prep.templates, cfg.edit.objective),
                           cfg.edit_shapes, cfg.edit.objective)
        slots = {"slot_u": torch.zeros(cfg.inference.slots, prep.dims.d_out),
                 "slot_w": torch.zeros(cfg.inference.slots, prep.dims.d_in)}
        prog = {r: open_program("onnxruntime", folder / s["file"], None, s["inputs"], s["outputs"]) for r, s in specs.items()}
        pout = prog["prefix"].run({**packed.prefix_feed, **slots})
        float_mods = build_modules(prep, {"inference": prep.lm.model, "prefix": prep.lm.model, "edit": prep.lm.model},
                                   cfg, ("edit",))
        ref = EagerProgram(float_mods["edit"], *float_mods["edit"].io())
        scale = float(pout["values"][0].norm()) / math.sqrt(prep.dims.d_out)
        corr[bits] = edit_correlation(ref, prog["edit"], edit_feed(packed, pout), cfg.edit_shapes.K,
                                      prep.dims.hidden_size, scale, draws=2, h=FZOO.zo.h)
    print("\nnbits edit-program loss correlation with fp32 (tiny random llama):", json.dumps(corr, indent=1))
    assert corr[8]["network_min"] >= 0.995 and corr[4]["network_min"] >= 0.95, corr
    assert corr[8]["network_mean"] > corr[4]["network_mean"], corr  # more bits, closer to fp32


def test_the_ort_shape_row_runs_without_torch(tmp_path):
    """The bench-shape row's two children on the tiny shape: the measured one imports no torch and
    runs exactly the steps asked, each step's K = 17 deltas through a K = 1 program."""
    from mobiedit.bench_shape import shape_config
    from mobiedit.bench_shape_ort import ORT_ROW

    folder, programs, out = tmp_path / "model", tmp_path / "programs", tmp_path / "row.json"
    zo = shape_config(ORT_ROW, 1, 2).zo.as_dict()
    code = ("import sys, json; from mobiedit.bench_shape import build_random; "
            "from mobiedit.bench_shape_ort import export_child, measured_child; "
            f"build_random('qwen2-tiny', __import__('pathlib').Path({str(folder)!r})); "
            f"export_child({str(folder)!r}, 1, 4, 8, 1, {str(programs)!r})")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=600)
    code = ("import json, sys; from mobiedit.bench_shape_ort import measured_child; "
            f"measured_child({str(programs)!r}, json.loads(sys.argv[1]), 2, {str(out)!r})")
    subprocess.run([sys.executable, "-c", code, json.dumps(zo)], check=True, timeout=600)
    row = json.loads(out.read_text())
    assert row["torch_in_process"] is False and row["status"] == "MAX_STEPS"
    assert (row["steps"], row["loss_evals"], row["program_K"], row["bits"], row["head_bits"]) == (2, 34, 1, 4, 8)
    assert row["peak_rss_mb"] >= row["after_load_rss_mb"] > row["runtime_rss_mb"] > 0
