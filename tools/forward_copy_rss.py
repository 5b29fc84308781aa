"""Peak RSS of building the search's forward model (``quantized_copy``) beside the float model.

    python tools/forward_copy_rss.py --model smollm2-135m --layer 5 --scheme w8a16 [--head-dtype float32]

One child process per call (this process never holds a model): it loads the float model, builds
the forward model the forward-only loop (and the ``-bf16`` backprop rows) search on, and prints
VmRSS / VmHWM after each phase plus the bytes of parameter storage the copy holds and shares with
the float model. Run it for each scheme; compare peaks across commits in one session.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp


def _child(model: str, layer: int, scheme: str, head_dtype: str, q) -> None:
    import torch

    torch.set_num_threads(1)
    from mobiedit.forward.quant import QuantConfig, quantized_copy
    from mobiedit.models import load_model
    from mobiedit.quiet import quiet_libraries
    from mobiedit.resolve import model_dir
    from mobiedit.rss import _leaves, peak_rss_mb, return_freed_memory, rss_mb as rss

    quiet_libraries()
    return_freed_memory()
    out = {"runtime_mb": rss()}
    lm = load_model(model_dir(model, progress=False))
    out |= {"after_load_mb": rss(), "peak_after_load_mb": peak_rss_mb()}
    fwd = quantized_copy(lm.model, lm.family, layer, QuantConfig(scheme, head_dtype=head_dtype))
    own = {t.untyped_storage().data_ptr() for p in lm.model.parameters() for t in _leaves(p)}
    storages = {}  # the copy's parameter storages: bytes, and whether the float model holds it too
    for p in fwd.parameters():
        for t in _leaves(p):
            s = t.untyped_storage()
            storages[s.data_ptr()] = (s.nbytes(), s.data_ptr() in own)
    out |= {"after_copy_mb": rss(), "peak_mb": peak_rss_mb(),
            "copy_own_mb": sum(n for n, shared in storages.values() if not shared) / 2**20,
            "copy_shared_mb": sum(n for n, shared in storages.values() if shared) / 2**20}
    q.put(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a model name (`mobiedit model --list`) or HF folder")
    ap.add_argument("--layer", type=int, default=5)
    ap.add_argument("--scheme", default="w8a16")
    ap.add_argument("--head-dtype", default="float32")
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child, args=(args.model, args.layer, args.scheme, args.head_dtype, q))
    p.start()
    res = q.get()
    p.join()
    print(json.dumps({"model": args.model, "layer": args.layer, "scheme": args.scheme,
                      "head_dtype": args.head_dtype} | {k: round(v, 1) for k, v in res.items()}))


if __name__ == "__main__":
    main()
