"""Does backprop's value delta live in a small subspace a forward-only search could be confined to
(issue 18)? If ROME's delta ``δ`` had most of its energy in a k-dimensional subspace known before
the edit, a zeroth-order search drawing its directions there would carry ~d/k times less noise.
Two candidate subspaces, both computable without backprop on the phone or once per model::

    python tools/edit_subspace.py --model smollm2-135m --requests mobiedit/data/known/smollm2-135m.json \\
        --offset 100 --n-basis 60 --n-held 20 --n-rome 4 --out results/edit_subspace/smollm2.json

* ``outputs``: the top-k eigenvectors of the MLP output second moment ``W C Wᵀ`` at the edit
  layer (``C`` the key statistics the rank-one update already uses);
* ``gradients``: the top-k right singular vectors of the unit value-search gradients at ``δ = 0``
  (the ``rome-lean`` objective through the prefix graph) of ``--n-basis`` requests — a subspace
  shared by facts, if there is one.

Reported: the energy ``‖P_k x‖² / ‖x‖²`` of ROME's searched delta (``--n-rome`` requests held apart
from the basis) and of the held-out gradients, beside a random direction's ``k/d``; the cosine of
each ROME delta with its own first gradient. The JSON is written atomically.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

import torch

log = logging.getLogger("edit_subspace")
KS = (4, 8, 16, 32, 64, 128, 256)


def energy(x: torch.Tensor, basis: torch.Tensor, k: int) -> torch.Tensor:
    """``‖x P_k‖² / ‖x‖²`` per row of ``x`` [n, d] for the first ``k`` rows of ``basis`` [m, d]."""
    return (x @ basis[:k].T).pow(2).sum(-1) / x.pow(2).sum(-1)


def output_basis(lm, ctx, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Eigenvectors (rows, largest first) and eigenvalues of ``W C Wᵀ`` at ``layer``."""
    from mobiedit.families import get_module

    w = get_module(lm.model, lm.family.mlp_out, layer).weight.detach().double()
    if not lm.family.weight_out_in:
        w = w.T
    ev, vec = torch.linalg.eigh(w @ ctx.mom2[layer].double() @ w.T)
    return vec.flip(1).T, ev.flip(0)


def first_gradient(lm, ctx, req, cfg) -> torch.Tensor:
    """The ``rome-lean`` objective's gradient in the value delta at ``δ = 0`` (float64 [d])."""
    from mobiedit.editing.compute_v import prefix_loss_fn
    from mobiedit.editing.context import build_edit_inputs
    from mobiedit.forward.graph import PrefixGraph
    from mobiedit.forward.prefix import compute_prefix_state

    inputs = build_edit_inputs(lm.tokenizer, req, ctx.templates, cfg.objective)
    state = compute_prefix_state(lm.model, lm.family, cfg.layer, inputs, None)
    loss_fn = prefix_loss_fn(PrefixGraph(lm.model, lm.family, state, cfg.objective))  # rome-lean's own objective
    delta = torch.zeros_like(state.v_init, requires_grad=True)
    with torch.enable_grad():
        loss, _ = loss_fn(delta)
        (grad,) = torch.autograd.grad(loss, [delta])
    return grad.double()


def probe(lm, ctx, cfg, reqs, n_basis: int, n_held: int, n_rome: int) -> dict:
    """The figures above for ``reqs`` (the first ``n_basis`` build the gradient basis)."""
    from mobiedit.session import forward_model_for, run_once

    out_vec, out_ev = output_basis(lm, ctx, cfg.layer)
    d = out_vec.shape[1]
    ks = [k for k in KS if k < d]
    grads = []
    for i, req in enumerate(reqs[:n_basis + n_held]):
        grads.append(first_gradient(lm, ctx, req, cfg))
        log.warning("gradient %d/%d", i + 1, n_basis + n_held)
    g = torch.stack(grads)
    g = g / g.norm(dim=1, keepdim=True)
    _, _, grad_vec = torch.linalg.svd(g[:n_basis], full_matrices=False)
    held = g[n_basis:]
    cos = held @ held.T
    res = {"d": d, "layer": cfg.layer, "random": {k: k / d for k in ks},
           "output_spectrum_energy": {k: float(out_ev[:k].sum() / out_ev.sum()) for k in ks},
           "held_gradients": {"n": len(held),
                              "mean_abs_cos_between": float((cos.abs().sum() - len(held)) / (len(held) ** 2 - len(held))),
                              "energy_outputs": {k: float(energy(held, out_vec, k).mean()) for k in ks},
                              "energy_gradients": {k: float(energy(held, grad_vec, k).mean()) for k in ks
                                                   if k <= n_basis}},
           "rome": []}
    fwd = forward_model_for(lm, cfg)
    for i, req in enumerate(reqs[n_basis:n_basis + n_rome]):
        o = run_once(lm, req, cfg, ctx, fwd)
        dl = o.delta.double().unsqueeze(0)
        rec = {"case_id": req.case_id, "norm": float(dl.norm()), "succeeded": o.succeeded,
               "cos_with_minus_first_gradient": float(-(dl[0] @ held[i]) / dl.norm()),
               "energy_outputs": {k: float(energy(dl, out_vec, k)[0]) for k in ks},
               "energy_gradients": {k: float(energy(dl, grad_vec, k)[0]) for k in ks if k <= n_basis}}
        log.warning("ROME delta %d/%d %s: %s", i + 1, n_rome, req.case_id, json.dumps(rec))
        res["rome"].append(rec)
    return res


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", required=True, help="local HF folder or checkpoint name")
    p.add_argument("--requests", required=True, help="request file (requests the model knows)")
    p.add_argument("--offset", type=int, default=100, help="first request (keep apart from bench rows)")
    p.add_argument("--n-basis", type=int, default=60)
    p.add_argument("--n-held", type=int, default=20)
    p.add_argument("--n-rome", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="runs/edit_subspace.json")
    args = p.parse_args()
    if args.n_rome > args.n_held:
        p.error("--n-rome must be <= --n-held (ROME runs on held-out requests)")
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    torch.set_num_threads(1)

    from mobiedit.atomic import atomic_write_text
    from mobiedit.bench_rows import row_config
    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.models import load_model
    from mobiedit.profile import resolve_layer
    from mobiedit.quiet import quiet_libraries
    from mobiedit.requests import load_requests
    from mobiedit.session import prepare

    quiet_libraries()
    model_dir = Path(resolve_model_arg(args.model))
    layer = resolve_layer(model_dir, None)
    cfg = row_config("rome-lean", layer, args.seed, (), model_dir)
    lm = load_model(model_dir)
    ctx = prepare(lm, cfg, args.seed)
    reqs = load_requests(args.requests)[args.offset:args.offset + args.n_basis + args.n_held]
    res = {"model": str(model_dir), "offset": args.offset,
           **probe(lm, ctx, cfg, reqs, args.n_basis, args.n_held, args.n_rome)}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out, json.dumps(res, indent=1))
    print(json.dumps({k: v for k, v in res.items() if k != "rome"}, indent=1))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
