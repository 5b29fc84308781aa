"""Seconds a session spends before its first edit: loading the model and ``session.prepare``
(context templates, key statistics), with the context-template cache cold or warm.

    python tools/prepare_time.py --model smollm2-135m [--row fzoo] [--layer 5] [--cold]

``--cold`` removes this model's cached templates first (only those: the key statistics stay
cached). Run it twice — ``--cold``, then without — to see what the cache saves; one thread.
"""
from __future__ import annotations

import argparse
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a model name (`mobiedit model --list`) or HF folder")
    ap.add_argument("--row", default="fzoo", help="the bench row whose config prepares (default: the shipped search)")
    ap.add_argument("--layer", type=int, default=None, help="edit layer (default: the model profile's)")
    ap.add_argument("--cold", action="store_true", help="drop this model's cached context templates first")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(1)
    from mobiedit.bench_rows import row_config
    from mobiedit.editing.template_cache import cached_entries
    from mobiedit.quiet import quiet_libraries
    from mobiedit.resolve import edit_layer_for, model_dir
    from mobiedit.session import prepare

    quiet_libraries()
    mdir = model_dir(args.model, progress=False)
    if args.cold:
        for p in cached_entries(mdir):
            p.unlink()
    from mobiedit.models import load_model

    t = time.perf_counter()
    lm = load_model(mdir)
    t_load = time.perf_counter() - t
    cfg = row_config(args.row, edit_layer_for(mdir, args.layer), 0, (), mdir)
    t = time.perf_counter()
    prepare(lm, cfg, seed=0)
    t_prep = time.perf_counter() - t
    print(f"{args.model} row {args.row} layer {cfg.layer}: load {t_load:.1f} s, prepare {t_prep:.1f} s "
          f"(context templates {'cold' if args.cold else 'as cached'})")


if __name__ == "__main__":
    main()
