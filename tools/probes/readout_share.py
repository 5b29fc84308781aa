"""Where one forward-only step's time goes: the suffix blocks vs the LM-head read-out (a probe).

    python tools/probes/readout_share.py gemma3-270m bf16 mobiedit/data/known/gemma3-270m.json 0 [float32|bf16]

Builds the model's profile config with ``quant.scheme`` SCHEME and ``quant.head_matmul`` (default
float32, whatever the profile says), the prefix graph of request INDEX of
REQUESTS, and times 3 calls of K = 17 deltas (after one warm-up), reporting the share spent in
``forward.graph._readout_loss``. One torch thread.
"""
from __future__ import annotations

import sys
import time

import torch


def main(name: str, scheme: str, req_path: str, idx: int, head: str = "float32") -> None:
    import mobiedit.forward.graph as G
    from mobiedit.api import load_model
    from mobiedit.editing.context import build_edit_inputs
    from mobiedit.methods.mobiedit import build_graph
    from mobiedit.requests import load_requests
    from mobiedit.resolve import edit_layer_for, load_method_config, model_dir
    from mobiedit.session import forward_model_for, prepare

    torch.set_num_threads(1)
    d = model_dir(name)
    lm = load_model(name)
    cfg = load_method_config("mobiedit", model_dir=d,
                             overrides={"quant": {"scheme": scheme, "head_matmul": head}, "layer": edit_layer_for(d, None)})
    ctx = prepare(lm, cfg, 0)
    inputs = build_edit_inputs(lm.tokenizer, load_requests(req_path)[idx], ctx.templates, cfg.objective)
    graph, state, _ = build_graph(forward_model_for(lm, cfg), lm, inputs, cfg)
    B, S, _ = state.shape
    print(f"{name} {scheme}, head_matmul {head}: rows B={B}, suffix S={S}, read-out rows {state.readout_label.numel()}, "
          f"head {tuple(graph.head.weight.shape)}")
    spent = [0.0]
    orig = G._readout_loss

    def timed(*a, **k):
        t = time.perf_counter()
        out = orig(*a, **k)
        spent[0] += time.perf_counter() - t
        return out

    G._readout_loss = timed
    K = 17
    deltas = torch.randn(K, state.v_init.numel(), generator=torch.Generator().manual_seed(0)) \
        * 0.05 * state.v_init.norm() / state.v_init.numel() ** 0.5
    graph(deltas)
    spent[0] = 0.0
    t = time.perf_counter()
    for _ in range(3):
        graph(deltas)
    tot = (time.perf_counter() - t) / 3
    print(f"per call of K={K}: {tot:.3f} s; read-out {spent[0] / 3:.3f} s ({100 * spent[0] / 3 / tot:.0f} %)")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), *sys.argv[5:6])
