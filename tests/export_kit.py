"""Shared pieces of the lowered-program tests on the tiny Llama (test_export_bundle.py: fp32
bundles; test_export_quantized.py: the shipped quantized programs): the prompt and the edit
request, the small export configuration, and a realistic edit-program feed."""
from __future__ import annotations

from mobiedit.editing.config import ContextConfig, ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs
from mobiedit.export.config import EditSetup, EditShapes, ExportConfig, InferenceShapes, LowerConfig, QuantizeConfig
from mobiedit.export.packing import feed_from_state, pack_edit
from mobiedit.forward.prefix import compute_prefix_state
from mobiedit.requests import EditRequest

PROMPT = "The Eiffel Tower is located in the city of"
REQUEST = EditRequest(case_id="t1", prompt="{} professionally plays the sport", subject="David Robinson",
                      target_new="baseball", target_true="basketball")


def export_cfg(runtime: str = "executorch", scheme: str = "fp32") -> ExportConfig:
    return ExportConfig(inference=InferenceShapes(max_seq_len=48, prefill_chunk=8, slots=4),
                        edit_shapes=EditShapes(K=5, rows=4, suffix=20, prefix=24, targets=24, kl=1),
                        quant=QuantizeConfig(scheme=scheme, calibration_batches=2),
                        lower=LowerConfig(runtime=runtime),
                        edit=EditSetup(layer=1, context=ContextConfig(lengths=((2, 2),)), stats_limit=100))


def bundle_edit_feed(lm, bundle):
    """A realistic edit-program feed (eager PrefixState of REQUEST with the bundle's templates)."""
    m = bundle.manifest
    obj = ObjectiveConfig()
    inputs = build_edit_inputs(lm.tokenizer, REQUEST, m["edit"]["templates"], obj)
    state = compute_prefix_state(lm.model, lm.family, m["edit_layer"], inputs)
    s = m["shapes"]
    shapes = EditShapes(K=s["edit_K"], rows=s["edit_rows"], suffix=s["edit_suffix"], prefix=s["edit_prefix"],
                        targets=s["edit_targets"], kl=s["edit_kl"])
    packed = pack_edit(inputs, shapes, obj)
    return feed_from_state(state, packed, shapes), packed, shapes, state
