"""The shipped quantized programs on the tiny Llama: the ONNX QDQ bundle's and the ExecuTorch 8da8w
(delta-decomposed) edit programs keep the fp32 loss signal, the quantized decode program decodes
like its eager quantized module, and the edit shapes grow to requests the exported ones refuse.
Each program is lowered once per session (module fixtures below; their tests run in the
``et_quant`` xdist group, see conftest). The fp32 bundles: test_export_bundle.py."""
from __future__ import annotations

import json
import math

import pytest
import torch

from mobiedit.errors import BundleError
from mobiedit.models import load_model
from mobiedit.requests import EditRequest
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs

from mobiedit.export.bundle import export_bundle, load_bundle
from mobiedit.export.calibration import edit_correlation
from mobiedit.export.generate import CacheShape, greedy_tokens
from mobiedit.export.graphs import EditModule
from mobiedit.export.packing import pack_edit
from mobiedit.export.pipeline import build_modules, capture, lower_programs, prepare, program_models
from mobiedit.export.runtime import EagerProgram, open_program
from export_kit import PROMPT, REQUEST, bundle_edit_feed, export_cfg

pytestmark = pytest.mark.parametrize("tiny_model_dir", ["llama"], indirect=True)


@pytest.fixture(scope="session")
def qdq_bundle(tiny_model_dir, tmp_path_factory):
    """The shipped ONNX QDQ bundle (its test runs in the ``et_quant`` xdist group, see conftest)."""
    return export_bundle(tiny_model_dir, tmp_path_factory.mktemp("qdq") / "qdq",
                         export_cfg("onnxruntime", "qdq_a16w8"))


@pytest.fixture(scope="session")
def et_quant(tiny_model_dir, tmp_path_factory):
    """The shipped ExecuTorch int8 configuration (8da8w inference, delta-decomposed 8da8w edit) — decode and edit
    programs only (decode also feeds the prompt, one token per call) — plus the eager quantized
    modules they came from."""
    cfg = export_cfg("executorch", "8da8w")
    prep = prepare(tiny_model_dir, cfg)
    modules = build_modules(prep, program_models(prep, cfg), cfg, ("decode", "edit"))
    folder = tmp_path_factory.mktemp("et_quant")
    specs = lower_programs(capture(modules, prep, cfg), modules, folder, prep, cfg)
    loaded: dict = {}
    progs = {r: open_program("executorch", folder / s["file"], s["method"], s["inputs"], s["outputs"], loaded)
             for r, s in specs.items()}
    return prep, modules, progs


def test_shipped_quantized_edit_programs_keep_the_loss_signal(tiny_model_dir, qdq_bundle, et_quant):
    lm = load_model(tiny_model_dir)
    qdq = load_bundle(qdq_bundle)
    feed, _, shapes, state = bundle_edit_feed(lm, qdq)
    ref = EditModule(lm.model, lm.family, 1, shapes)
    ref = EagerProgram(ref, *ref.io())
    scale = float(state.v_init.norm()) / math.sqrt(state.v_init.shape[0])
    _, _, progs = et_quant
    h = qdq.manifest["recipe"]["zo"]["h"]  # the shipped recipe's step
    corr = {"onnxruntime qdq_a16w8": edit_correlation(ref, qdq.program("edit"), feed, shapes.K, 64, scale, h=h),
            "executorch 8da8w/delta": edit_correlation(ref, progs["edit"], feed, shapes.K, 64, scale, h=h)}
    print("\nedit-program loss correlation with fp32 (tiny random llama):", json.dumps(corr, indent=1))
    assert qdq.manifest["checks"]["edit_correlation"]["min"] >= 0.99
    # the check perturbed at the recipe's own h, the one the bundle's search steps with
    assert qdq.manifest["checks"]["edit_correlation"]["h"] == qdq.manifest["recipe"]["zo"]["h"]
    for name, c in corr.items():
        assert c["min"] >= 0.99, (name, c)


def test_quantized_programs_decode_like_eager_quantized(tiny_model_dir, et_quant):
    prep, modules, progs = et_quant
    d = prep.dims
    cache = CacheShape(d.num_layers, d.num_kv_heads, 48, d.head_dim, 1)  # prompt fed by decode
    ids = prep.lm.tokenizer(PROMPT)["input_ids"]
    zeros = torch.zeros(4, d.d_out), torch.zeros(4, d.d_in)
    dec = EagerProgram(modules["decode"], *modules["decode"].io())
    eager = greedy_tokens(dec, dec, ids, 12, cache, *zeros)
    assert greedy_tokens(progs["decode"], progs["decode"], ids, 12, cache, *zeros) == eager


def test_fit_edit_shapes_takes_a_request_the_exported_shapes_refuse(et_quant):
    """``export_bundle(..., fit_requests=...)`` / ``mobiedit export --fit-requests``: the edit shapes
    grow to the requests, measured with the bundle's own context templates."""
    from mobiedit.export.pipeline import fit_edit_shapes

    prep = et_quant[0]
    cfg, obj = export_cfg("executorch", "8da8w"), ObjectiveConfig()
    long = EditRequest(case_id="t2", prompt="After a long career in the league and many famous games, {} plays",
                       subject="David Robinson", target_new="baseball", target_true="basketball")
    inputs = build_edit_inputs(prep.lm.tokenizer, long, prep.templates, obj)
    with pytest.raises(BundleError, match="edit_prefix"):
        pack_edit(inputs, cfg.edit_shapes, obj)
    fitted = fit_edit_shapes(prep, cfg, [REQUEST, long])
    assert fitted.edit_shapes.prefix > cfg.edit_shapes.prefix and fitted.edit_shapes.K == cfg.edit_shapes.K
    assert fitted.quant == cfg.quant and fitted.edit == cfg.edit  # only the shapes change
    pack_edit(inputs, fitted.edit_shapes, obj)
    assert fit_edit_shapes(prep, fitted, [REQUEST, long]) == fitted
