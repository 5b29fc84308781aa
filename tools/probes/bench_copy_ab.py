"""A/B: a SmolLM2 bench row's peak RSS (one request, the bench's own child) with the search's copy
built the old way (a float deep copy first, then quantized) and the current way — each in its own
spawned process, one after another, in one run (session 38).

    python tools/probes/bench_copy_ab.py fzoo,fzoo-bf16
"""
import copy
import json
import multiprocessing as mp
import os
import sys
import tempfile

def child(old, row, out):
    import mobiedit.methods.mobiedit as mm
    from mobiedit.forward import quant
    if old:
        def old_copy(model, family, layer, cfg):
            if cfg.scheme == "none" and cfg.head_dtype == "float32":
                return model
            q = quant.quantize_inplace(copy.deepcopy(model), family, layer, cfg)
            return quant.narrow_head(q, family, quant.head_dtype_of(cfg.head_dtype, "quant.head_dtype"))
        quant.quantized_copy = old_copy; mm.quantized_copy = old_copy
    from mobiedit.bench import _child
    from mobiedit.bench_rows import parse_rows
    from mobiedit.resolve import model_dir
    spec = parse_rows(row, 1)[0]
    _child(spec, str(model_dir("smollm2-135m", progress=False)), "mobiedit/data/known/smollm2-135m.json", 5, 0, out, ability=False)

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    for row in sys.argv[1].split(","):
        for old in (True, False):
            d = tempfile.mkdtemp()
            out = os.path.join(d, "r.json")
            p = ctx.Process(target=child, args=(old, row, out)); p.start(); p.join()
            r = json.load(open(out))
            print(row, "old" if old else "new", "peak RSS", round(r["peak_rss_mb"]), "s/edit", round(r.get("wall_per_edit_s", 0), 1), flush=True)
