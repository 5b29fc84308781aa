"""Loss correlation of ``nbits`` edit programs with the fp32 edit graph, per weight setting, on one
model: how far ONNX Runtime's block-quantized weights bend the surface the ZO search reads.

    python tools/nbits_correlation.py --model smollm2-135m --variants 8:32:0,8:32:4,4:32:8,4:32:0,4:16:0 \
        [--draws 2] [--out results/nbits/smollm2.json]

A variant is ``BITS:BLOCK:HEAD_BITS[:COMPUTE]`` (HEAD_BITS 0: BITS; COMPUTE fp32 | int8, default
fp32: ``QuantizeConfig.nbits_compute``). Each lowers only the edit program
(``--edit-quant nbits``, quantized LM head, the model profile's layer and objective) and scores it
with the exporter's own check (:func:`mobiedit.export.calibration.edit_correlation`: centered
correlation of the K losses at ZO-like deltas, min/mean over the draws; ``network_*`` without the
decay term) against the fp32 program on one sampled edit. One thread; about a minute per variant
on SmolLM2 here.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="checkpoint name or folder")
    p.add_argument("--variants", default="8:32:0,8:32:4,4:32:8,4:32:0")
    p.add_argument("--draws", type=int, default=2, help="delta draws per variant (the export check's)")
    p.add_argument("--out", help="JSON file for the figures")
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from mobiedit.atomic import atomic_write_text
    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.export.calibration import edit_correlation, sample_edits
    from mobiedit.export.config import ExportConfig, LowerConfig, QuantizeConfig
    from mobiedit.export.packing import edit_feed
    from mobiedit.export.pipeline import build_modules, capture, lower_programs, prepare, program_models
    from mobiedit.export.recipe import model_recipe
    from mobiedit.export.runtime import EagerProgram, open_program
    from mobiedit.profile import with_profile
    from mobiedit.quiet import quiet_libraries

    quiet_libraries()
    model = resolve_model_arg(a.model)
    base = with_profile(ExportConfig(quant=QuantizeConfig(scheme="fp32", edit_scheme="nbits", quantize_lm_head=True,
                                                          quantize_embedding=True),
                                     lower=LowerConfig(runtime="onnxruntime")), model, "edit", method="mobiedit")
    prep = prepare(model, base)
    ref_mods = build_modules(prep, {k: prep.lm.model for k in ("inference", "prefix", "edit")}, base, ("prefix", "edit"))
    edits = sample_edits(prep.lm.tokenizer, prep.templates, base.edit.objective, base.edit_shapes, 1)
    slots = {"slot_u": torch.zeros(base.inference.slots, prep.dims.d_out),
             "slot_w": torch.zeros(base.inference.slots, prep.dims.d_in)}
    pout = EagerProgram(ref_mods["prefix"], *ref_mods["prefix"].io()).run({**edits[0][1].prefix_feed, **slots})
    scale = float(pout["values"][0].norm()) / prep.dims.d_out ** 0.5
    feed, ref = edit_feed(edits[0][1], pout), EagerProgram(ref_mods["edit"], *ref_mods["edit"].io())
    h = model_recipe(model, base.edit_shapes.K).zo.h  # the export check's: the bundle search's own step
    rows = []
    for v in a.variants.split(","):
        bits, block, head, *rest = v.split(":")
        bits, block, head, compute = int(bits), int(block), int(head), (rest or ["fp32"])[0]
        cfg = dataclasses.replace(base, quant=dataclasses.replace(base.quant, nbits=bits, group_size=block, nbits_head=head,
                                                                  nbits_compute=compute))
        t0 = time.perf_counter()
        with tempfile.TemporaryDirectory() as tmp:
            mods = build_modules(prep, program_models(prep, cfg), cfg, ("edit",))
            spec = lower_programs(capture(mods, prep, cfg), mods, Path(tmp), prep, cfg)["edit"]
            size = sum(f.stat().st_size for f in Path(tmp).iterdir())
            cand = open_program("onnxruntime", Path(tmp) / spec["file"], None, spec["inputs"], spec["outputs"])
            corr = edit_correlation(ref, cand, feed, cfg.edit_shapes.K, prep.dims.hidden_size, scale, draws=a.draws, h=h)
        rows.append({"bits": bits, "block": block, "head_bits": head or bits, "compute": compute,
                     "edit_program_bytes": size, **corr})
        print(f"int{bits} weights, LM head int{head or bits}, blocks of {block}, {compute} compute: network correlation min "
              f"{corr['network_min']:.4f} mean {corr['network_mean']:.4f}; edit program {size / 1e6:.1f} MB "
              f"({time.perf_counter() - t0:.0f} s)", flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(a.out, json.dumps({"model": str(model), "layer": prep.layer, "draws": a.draws, "h": h,
                                             "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
