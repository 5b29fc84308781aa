"""Time ROME's value search through the whole model (``rome``) and through the prefix graph
(``rome-lean``) side by side, on one thread, on the same request and inputs.

    python tools/time_value_search.py --model smollm2-135m --layer 5 --steps 4 --repeat 2

Prints seconds per step of each path (rows interleaved, so a noisy box loads both alike), their
ratio, and whether the two loss trajectories agree.
"""
from __future__ import annotations

import argparse
import dataclasses
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="smollm2-135m", help="checkpoint name or HF folder")
    ap.add_argument("--requests", default="mobiedit/data/known/smollm2-135m.json")
    ap.add_argument("--index", type=int, default=0, help="which request of the file")
    ap.add_argument("--layer", type=int, default=5)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=2)
    args = ap.parse_args()

    import torch

    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.models import load_model
    from mobiedit.requests import load_requests
    from mobiedit.editing.compute_v import compute_v
    from mobiedit.editing.config import ROMEConfig
    from mobiedit.editing.context import build_edit_inputs, generate_context_templates

    torch.set_num_threads(1)
    lm = load_model(resolve_model_arg(args.model))
    req = load_requests(args.requests)[args.index]
    cfg = ROMEConfig(layer=args.layer, steps=args.steps, early_loss=0.0)
    tpl = generate_context_templates(lm.model, lm.tokenizer, cfg.context, torch.Generator().manual_seed(0))
    inputs = build_edit_inputs(lm.tokenizer, req, tpl, cfg.objective)
    print(f"{lm.path.name}: layer {args.layer}, batch {tuple(inputs.batch.input_ids.shape)}, {args.steps} steps")
    times: dict[str, list[float]] = {"rome": [], "rome-lean": []}
    losses: dict[str, list[float]] = {}
    for _ in range(args.repeat):
        for name, reuse in (("rome", False), ("rome-lean", True)):
            t0 = time.perf_counter()
            r = compute_v(lm.model, lm.family, inputs, dataclasses.replace(cfg, prefix_reuse=reuse))
            times[name].append((time.perf_counter() - t0) / r.steps)
            losses[name] = r.losses
    best = {k: min(v) for k, v in times.items()}
    for k, v in best.items():
        print(f"{k:<10} {v:7.2f} s/step (best of {args.repeat}; all {[round(x, 2) for x in times[k]]})")
    same = all(abs(a - b) <= 1e-4 * max(1.0, abs(a)) for a, b in zip(losses["rome"], losses["rome-lean"]))
    print(f"speed-up rome / rome-lean: {best['rome'] / best['rome-lean']:.2f}x; same loss trajectory: {same}")


if __name__ == "__main__":
    main()
