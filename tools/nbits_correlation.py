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

    python tools/nbits_correlation.py --model smollm2-135m --bundle BUNDLE [--h 0.05,0.2,0.5] [--draws 4] [--out F]

With ``--bundle`` the same check re-runs on that bundle's own edit program (read only; its edit layer
and shapes) at each ``--h`` (default: the recipe's ``zo.h``) instead of lowering variants: what a
bundle exported before session 51, checked at h 0.05 and 0.5 whatever its recipe, reads at the
search's own h.
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
    p.add_argument("--bundle", help="check this bundle's edit program instead of lowering variants")
    p.add_argument("--h", help="comma-separated perturbation sizes (default: the bundle recipe's zo.h)")
    p.add_argument("--draws", type=int, default=2, help="delta draws per variant (the export check's)")
    p.add_argument("--out", help="JSON file for the figures")
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from mobiedit.atomic import atomic_write_text
    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.export.calibration import edit_correlation, float_check_reference
    from mobiedit.export.config import ExportConfig, LowerConfig, QuantizeConfig
    from mobiedit.export.pipeline import build_modules, capture, lower_programs, prepare, program_models
    from mobiedit.export.recipe import model_recipe
    from mobiedit.export.runtime import open_program
    from mobiedit.profile import with_profile
    from mobiedit.quiet import quiet_libraries

    quiet_libraries()
    model = resolve_model_arg(a.model)
    base = with_profile(ExportConfig(quant=QuantizeConfig(scheme="fp32", edit_scheme="nbits", quantize_lm_head=True,
                                                          quantize_embedding=True),
                                     lower=LowerConfig(runtime="onnxruntime")), model, "edit", method="mobiedit")
    if a.bundle:
        return _bundle_rows(a, model, base)
    prep = prepare(model, base)
    _, ref, feed, scale = float_check_reference(prep, base)
    if a.h and "," in a.h:
        p.error("--h takes one size when lowering variants (several only with --bundle)")
    h = float(a.h) if a.h else model_recipe(model, base.edit_shapes.K).zo.h  # the export check's: the search's step
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


def _bundle_rows(a, model, base) -> int:
    """``--bundle``: the check on the bundle's own edit program at each ``--h``."""
    import dataclasses

    from mobiedit.atomic import atomic_write_text
    from mobiedit.export.bundle import load_bundle
    from mobiedit.export.calibration import edit_correlation, float_check_reference
    from mobiedit.export.pipeline import prepare
    from mobiedit.export.recipe import recipe_of
    from mobiedit.export.verify import edit_shapes_of

    b = load_bundle(a.bundle)
    recipe_h = recipe_of(b.manifest).zo.h
    cfg = dataclasses.replace(base, edit=dataclasses.replace(base.edit, layer=b.manifest["edit_layer"]),
                              edit_shapes=edit_shapes_of(b.manifest))
    prep = prepare(model, cfg)
    req, ref, feed, scale = float_check_reference(prep, cfg)
    rows = []
    for h in [float(x) for x in a.h.split(",")] if a.h else [recipe_h]:
        t0 = time.perf_counter()
        corr = edit_correlation(ref, b.program("edit"), feed, cfg.edit_shapes.K, prep.dims.hidden_size, scale,
                                draws=a.draws, h=h)
        rows.append(corr)
        print(f"h {h:g}: network correlation min {corr['network_min']:.4f} mean {corr['network_mean']:.4f} "
              f"(full loss min {corr['min']:.4f} mean {corr['mean']:.4f}; {a.draws} draws, "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(a.out, json.dumps({"model": str(model), "bundle": str(a.bundle), "runtime": b.manifest["runtime"],
                                             "edit_quantization": b.manifest.get("edit_quantization"),
                                             "layer": prep.layer, "case": req.case_id, "draws": a.draws,
                                             "recipe_h": recipe_h, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
