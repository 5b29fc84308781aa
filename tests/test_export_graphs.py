"""Eager export graphs (no lowering): the padded edit program equals PrefixGraph, the prefix program
reproduces compute_prefix_state, the static-cache step modules decode like HF, and the lint rejects
what an NPU would."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from mobiedit.errors import BundleError
from mobiedit.families import get_module
from mobiedit.forward.graph import PrefixGraph
from mobiedit.forward.prefix import compute_prefix_state
from mobiedit.models import load_model
from mobiedit.requests import EditRequest
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs

from mobiedit.export.config import EditShapes, InferenceShapes
from mobiedit.export.generate import CacheShape, greedy_tokens
from mobiedit.export.graphs import EditModule, PrefixModule, StepModule
from mobiedit.export.lint import LintConfig, lint_exported
from mobiedit.export.lower import export_graph
from mobiedit.export.packing import edit_feed, edit_needs, feed_from_state, fit_shapes, pack_edit
from mobiedit.export.runtime import EagerProgram

TEMPLATES = ["{}", "The man said that. {}", "Because of the rain in the city, {}"]
SHAPES = EditShapes(K=6, rows=6, suffix=20, prefix=32, targets=40, kl=2)


def _request() -> EditRequest:
    return EditRequest(case_id="t", prompt="{} professionally plays the sport", subject="David Robinson",
                       target_new="baseball game", target_true="basketball")


def _deltas(v_init: torch.Tensor, K: int) -> torch.Tensor:
    """ZO-like deltas: 0, small and up to ‖v_init‖ (the search's range)."""
    g = torch.Generator().manual_seed(1)
    d = v_init.shape[0]
    scale = float(v_init.norm()) / math.sqrt(d)
    mult = torch.tensor([0.0, 0.05, 0.2, 0.5, 1.0, 1.0][:K]).view(K, 1)
    return torch.randn(K, d, generator=g) * scale * mult


@pytest.mark.parametrize("layer", [0, 1])
def test_edit_program_equals_prefix_graph(tiny_model_dir, layer):
    lm = load_model(tiny_model_dir)
    cfg = ObjectiveConfig()
    inputs = build_edit_inputs(lm.tokenizer, _request(), TEMPLATES, cfg)
    state = compute_prefix_state(lm.model, lm.family, layer, inputs)
    deltas = _deltas(state.v_init, SHAPES.K)
    ref_loss, ref_correct = PrefixGraph(lm.model, lm.family, state, cfg)(deltas)

    packed = pack_edit(inputs, SHAPES, cfg)
    # host-buildable dtypes only (no bool: ExecuTorch's Java API cannot make bool tensors)
    assert {t.dtype for t in {**packed.prefix_feed, **packed.static_feed}.values()} <= {torch.int64, torch.float32}
    assert packed.static_feed["mask"].dtype == torch.int64
    assert set(packed.static_feed["target_rows"].unique().tolist()) == {0.0, 1.0}
    edit = EditModule(lm.model, lm.family, layer, SHAPES)
    assert "kl_suffix_index" in edit.io()[0] and "kl_index" not in edit.io()[0]
    prog = EagerProgram(edit, *edit.io())
    # 1) the eager PrefixState, padded
    out = prog.run({**feed_from_state(state, packed, SHAPES), "deltas": deltas})
    # 2) the on-phone path: the prefix program computes the state
    prefix = PrefixModule(lm.model, lm.family, layer, SHAPES, slots=2)
    d = edit.dims
    pout = EagerProgram(prefix, *prefix.io()).run(
        {**packed.prefix_feed, "slot_u": torch.zeros(2, d.d_out), "slot_w": torch.zeros(2, d.d_in)})
    out2 = prog.run({**edit_feed(packed, pout), "deltas": deltas})
    n = len(TEMPLATES)
    for o in (out, out2):
        err = (o["losses"] - ref_loss).abs() / ref_loss.abs().clamp(min=1.0)
        assert err.max() < 1e-5, (o["losses"], ref_loss)
        # correct = exact count of argmax targets per row, in both graphs (one meaning of "correct")
        assert torch.equal(o["correct"], o["correct"].round())
        assert torch.equal(o["correct"][:, :n], ref_correct)
        assert (o["correct"][:, n:] == 0).all()  # padded / KL rows have no targets
    assert torch.allclose(pout["values"][0], state.v_init, atol=1e-5)
    assert torch.allclose(pout["kl_ref"][:1], state.kl_ref, atol=1e-5)
    assert (ref_loss.max() - ref_loss.min()) > 1e-3  # the deltas matter


def test_edit_program_counts_argmax_targets_exactly(tiny_model_dir):
    """``correct`` is an exact per-row count: with the unedited model's own argmax tokens as labels,
    delta 0 gives exactly target_len on every rewrite row (no tolerance), any other label 0."""
    from mobiedit.forward.prefix import readouts, suffix_geometry

    lm = load_model(tiny_model_dir)
    cfg = ObjectiveConfig()
    inputs = build_edit_inputs(lm.tokenizer, _request(), TEMPLATES, cfg)
    state = compute_prefix_state(lm.model, lm.family, 1, inputs)
    packed = pack_edit(inputs, SHAPES, cfg)
    s, _, _, _ = suffix_geometry(inputs)
    rr, rp, rl = readouts(inputs, s)
    is_t = rl >= 0
    with torch.no_grad():
        logits = lm.model(input_ids=inputs.batch.input_ids).logits  # right-padded rows: causal is enough
    argmax = logits[rr[is_t], s[rr[is_t]] + rp[is_t]].argmax(-1)
    edit = EditModule(lm.model, lm.family, 1, SHAPES)
    feed = feed_from_state(state, packed, SHAPES)
    deltas = torch.zeros(SHAPES.K, edit.dims.d_out)
    n, n_t = inputs.n_rewrite, int(is_t.sum())
    for labels, want in ((argmax, float(inputs.target_len)), ((argmax + 1) % edit.dims.vocab_size, 0.0)):
        lab = feed["target_label"].clone()
        lab[:n_t] = labels
        out = EagerProgram(edit, *edit.io()).run({**feed, "target_label": lab, "deltas": deltas})
        assert torch.equal(out["correct"][:, :n], torch.full((SHAPES.K, n), want)), out["correct"]
        assert (out["correct"][:, n:] == 0).all()


def test_pack_edit_refuses_what_does_not_fit(tiny_model_dir):
    lm = load_model(tiny_model_dir)
    inputs = build_edit_inputs(lm.tokenizer, _request(), TEMPLATES, ObjectiveConfig())
    with pytest.raises(BundleError) as e:
        pack_edit(inputs, EditShapes(K=2, rows=6, suffix=2, prefix=32, targets=40, kl=1), ObjectiveConfig())
    assert "edit_suffix" in str(e.value)


def test_fit_shapes_grows_to_the_largest_request_and_then_packs_it(tiny_model_dir):
    lm = load_model(tiny_model_dir)
    long = EditRequest(case_id="long", prompt="In the long and winding story told by the old sailor, {} plays",
                       subject="David Robinson", target_new="baseball game", target_true="basketball")
    ins = [build_edit_inputs(lm.tokenizer, r, TEMPLATES, ObjectiveConfig()) for r in (_request(), long)]
    needs = [edit_needs(i) for i in ins]
    small = EditShapes(K=2, rows=2, suffix=1, prefix=1, targets=1, kl=1)
    fitted = fit_shapes(small, needs)
    assert fitted.K == 2  # K is the estimator's, never grown
    for field in ("rows", "suffix", "prefix", "targets", "kl"):
        assert getattr(fitted, field) == max(n[field] for n in needs), field
    assert fitted.tokens >= max(n["tokens"] for n in needs)
    for i in ins:  # every request now packs; one row less and the longest does not
        pack_edit(i, fitted, ObjectiveConfig())
    with pytest.raises(BundleError, match="edit_prefix"):
        pack_edit(ins[1], dataclasses.replace(fitted, prefix=fitted.prefix - 1), ObjectiveConfig())
    assert fit_shapes(fitted, needs) == fitted and fit_shapes(SHAPES, []) == SHAPES


def _hf_greedy(model, ids: list[int], n: int) -> list[int]:
    x, out = torch.tensor([ids]), []
    with torch.no_grad():
        for _ in range(n):
            t = int(model(input_ids=x).logits[0, -1].argmax())
            out.append(t)
            x = torch.cat([x, torch.tensor([[t]])], 1)
    return out


def test_step_modules_decode_like_hf_with_slots(tiny_model_dir):
    """Prefill (chunk 8) + decode with a static cache == HF greedy; slots == the weight edit."""
    lm = load_model(tiny_model_dir)
    shapes = InferenceShapes(max_seq_len=48, prefill_chunk=8, slots=3)
    pre, dec = (StepModule(lm.model, lm.family, 1, c, shapes) for c in (8, 1))
    d = pre.dims
    cache = CacheShape(d.num_layers, d.num_kv_heads, 48, d.head_dim, 8)
    ids = lm.tokenizer("The Eiffel Tower is located in the city of")["input_ids"]
    g = torch.Generator().manual_seed(0)
    u, w = torch.randn(3, d.d_out, generator=g), torch.randn(3, d.d_in, generator=g) * 0.5
    u[2], w[2] = 0, 0  # an empty slot
    weight = get_module(lm.model, lm.family.mlp_out, 1).weight
    base = weight.detach().clone()
    for su, sw in ((torch.zeros_like(u), torch.zeros_like(w)), (u, w)):
        got = greedy_tokens(EagerProgram(pre, *pre.io()), EagerProgram(dec, *dec.io()), ids, 12, cache, su, sw)
        with torch.no_grad():
            delta = su.T @ sw
            weight.copy_(base + (delta if lm.family.weight_out_in else delta.T))
        want = _hf_greedy(lm.model, ids, 12)
        with torch.no_grad():
            weight.copy_(base)
        assert got == want


class _Bad(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        idx = torch.nonzero(x > 0)
        y = torch.cond(x.sum() > 0, lambda t: t + 1, lambda t: t - 1, (x,))
        return idx, x[x > 0], self.lin(y)


def test_lint_rejects_a_deliberately_bad_graph():
    ep = torch.export.export(_Bad(), (torch.randn(4, 3),), strict=False)
    findings = lint_exported(ep, LintConfig(quantized=True))
    rules = {(f.rule, f.node.split("_")[0]) for f in findings}
    assert ("control-flow", "cond") in rules
    assert ("dynamic-shape", "nonzero") in rules
    assert any(f.rule == "dynamic-shape" and "boolean-mask" in f.detail for f in findings)
    assert any(f.rule == "float-compute" and "lin" in f.detail for f in findings)
    dyn = torch.export.export(torch.nn.Linear(3, 3), (torch.randn(4, 3),),
                              dynamic_shapes=({0: torch.export.Dim("n")},), strict=False)
    assert any(f.rule == "dynamic-shape" for f in lint_exported(dyn, LintConfig()))


def test_lint_accepts_the_edit_program_and_flags_float_weights(tiny_model_dir):
    lm = load_model(tiny_model_dir)
    edit = EditModule(lm.model, lm.family, 1, SHAPES)
    ep = export_graph(edit, edit.example_inputs(), "edit")
    islands = frozenset({lm.family.mlp_out.format(1), lm.family.lm_head})
    assert lint_exported(ep, LintConfig()) == []
    float_findings = lint_exported(ep, LintConfig(quantized=True, islands=islands))
    assert float_findings and all(f.rule == "float-compute" for f in float_findings)
    assert not any(lm.family.lm_head in f.detail for f in float_findings)  # the island is allowed


def test_onnx_outputs_take_their_names_even_where_an_inner_value_had_one(tmp_path):
    """The exporter names values after FX nodes (e.g. ``cos``): the graph output asked to be ``cos``
    gets the name, the inner value moves aside, and the saved program computes the same."""
    import numpy as np
    import onnx_ir as ir
    import onnxruntime as ort

    from mobiedit.errors import LoweringError
    from mobiedit.export.lower import _save_ir, name_outputs

    class Two(torch.nn.Module):
        def forward(self, x):
            c = torch.cos(x)
            return c * 2, c + 1

    ep = export_graph(Two(), (torch.zeros(3),), "two")
    prog = torch.onnx.export(ep, (), None, input_names=["x"], dynamo=True, optimize=True, verify=False, verbose=False)
    graph = prog.model.graph
    inner = [v for node in graph for v in node.outputs if v not in list(graph.outputs)]
    inner[0].name = "cos"  # as the exporter can name it
    name_outputs(graph, ["cos", "sin"])
    assert [v.name for v in graph.outputs] == ["cos", "sin"]
    names = [v.name for node in graph for v in node.outputs]
    assert len(names) == len(set(names)) and "cos__v" in names
    _save_ir(prog.model, tmp_path / "two.onnx", external=True)
    y = ort.InferenceSession(str(tmp_path / "two.onnx"), providers=["CPUExecutionProvider"]).run(
        ["cos", "sin"], {"x": np.array([0.0, 1.0, 2.0], np.float32)})
    np.testing.assert_allclose(y[0], 2 * np.cos([0.0, 1.0, 2.0]), rtol=1e-6)
    with pytest.raises(LoweringError, match="expected"):
        name_outputs(graph, ["only_one"])
    assert isinstance(prog.model, ir.Model)
