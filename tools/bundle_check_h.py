"""The export check of an existing bundle's edit program, re-run at chosen perturbation sizes.

    python tools/bundle_check_h.py --model smollm2-135m --bundle BUNDLE [--h 0.05,0.2,0.5] [--draws 4]
        [--out results/bundle_check/smollm2_qdq.json]

The exporter's own check (:func:`mobiedit.export.calibration.edit_correlation`: centered correlation
of the bundle edit program's K losses with the fp32 eager edit program's, min/mean over the draws,
``network_*`` without the decay term) on the first sampled edit that fits the bundle's shapes, at
each ``--h`` (default: the bundle recipe's ``zo.h`` only). Read-only on the bundle. Bundles exported
before session 51 were checked at h 0.05 and 0.5 whatever their recipe; this says what their
programs read at the search's own h. One thread.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="the bundle's checkpoint name or folder (the fp32 reference)")
    p.add_argument("--bundle", required=True, help="bundle folder (read only)")
    p.add_argument("--h", help="comma-separated perturbation sizes (default: the bundle recipe's zo.h)")
    p.add_argument("--draws", type=int, default=4, help="delta draws per h")
    p.add_argument("--out", help="JSON file for the figures")
    a = p.parse_args(argv)

    import torch

    torch.set_num_threads(1)
    from mobiedit.atomic import atomic_write_text
    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.export.bundle import load_bundle
    from mobiedit.export.calibration import edit_correlation, sample_edits
    from mobiedit.export.config import ExportConfig
    from mobiedit.export.packing import edit_feed
    from mobiedit.export.pipeline import build_modules, prepare
    from mobiedit.export.recipe import recipe_of
    from mobiedit.export.runtime import EagerProgram
    from mobiedit.export.verify import edit_shapes_of
    from mobiedit.profile import with_profile
    from mobiedit.quiet import quiet_libraries

    quiet_libraries()
    model = resolve_model_arg(a.model)
    b = load_bundle(a.bundle)
    hs = [float(x) for x in a.h.split(",")] if a.h else [recipe_of(b.manifest).zo.h]
    cfg = with_profile(ExportConfig(), model, "edit", method="mobiedit")
    cfg = dataclasses.replace(cfg, edit=dataclasses.replace(cfg.edit, layer=b.manifest["edit_layer"]),
                              edit_shapes=edit_shapes_of(b.manifest))
    prep = prepare(model, cfg)
    ref_mods = build_modules(prep, {k: prep.lm.model for k in ("inference", "prefix", "edit")}, cfg, ("prefix", "edit"))
    edits = sample_edits(prep.lm.tokenizer, prep.templates, cfg.edit.objective, cfg.edit_shapes, 1)
    slots = {"slot_u": torch.zeros(cfg.inference.slots, prep.dims.d_out),
             "slot_w": torch.zeros(cfg.inference.slots, prep.dims.d_in)}
    pout = EagerProgram(ref_mods["prefix"], *ref_mods["prefix"].io()).run({**edits[0][1].prefix_feed, **slots})
    scale = float(pout["values"][0].norm()) / prep.dims.d_out ** 0.5
    feed, ref = edit_feed(edits[0][1], pout), EagerProgram(ref_mods["edit"], *ref_mods["edit"].io())
    cand = b.program("edit")
    rows = []
    for h in hs:
        t0 = time.perf_counter()
        corr = edit_correlation(ref, cand, feed, cfg.edit_shapes.K, prep.dims.hidden_size, scale, draws=a.draws, h=h)
        rows.append(corr)
        print(f"h {h:g}: network correlation min {corr['network_min']:.4f} mean {corr['network_mean']:.4f} "
              f"(full loss min {corr['min']:.4f} mean {corr['mean']:.4f}; {a.draws} draws, "
              f"{time.perf_counter() - t0:.0f} s)", flush=True)
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(a.out, json.dumps({"model": str(model), "bundle": str(a.bundle),
                                             "runtime": b.manifest["runtime"],
                                             "edit_quantization": b.manifest.get("edit_quantization"),
                                             "layer": prep.layer, "case": edits[0][0].case_id, "draws": a.draws,
                                             "recipe_h": recipe_of(b.manifest).zo.h, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
