"""The edit graph, measured: prefix-activation reuse (per-step time of the prefix graph vs the full
graph, both batched over K deltas, same objective, beside the theoretical FLOP ratio of the two;
``mobiedit bench-prefix``) and quantization (the centered correlation of a quantized graph's K
losses with the float graph's; ``mobiedit bench-quant``)."""
from __future__ import annotations

import logging
import time

import torch

from .resolve import add_model_args
from .families import Family, get_module, n_layers
from .forward.graph import FullGraph, PrefixGraph
from .forward.prefix import PrefixState

log = logging.getLogger(__name__)


def _linear_params(module: torch.nn.Module) -> int:
    return sum(m.weight.numel() for m in module.modules() if isinstance(m, torch.nn.Linear)
               or type(m).__name__ == "Conv1D")


def flops(model, family: Family, layer: int, st: PrefixState, seq_lens: list[int], K: int) -> tuple[float, float]:
    """(full, prefix) multiply-add FLOPs (×2) of one step of K deltas.

    Full: every layer on every token of every row, LM head at every position.
    Prefix: layers > ``layer`` on the S suffix tokens of each row (attending to P + j + 1 keys),
    LM head at the R read-outs.
    """
    L = n_layers(model, family)
    d = st.h_suffix.shape[-1]
    per_layer = [2 * _linear_params(get_module(model, family.layer, i)) for i in range(L)]
    vocab = st.kl_ref.shape[-1]
    head = 2 * d * vocab
    attn = 4 * d  # per (query, key) pair: QK and AV
    full = 0.0
    for T in seq_lens:
        pairs = T * (T + 1) / 2
        full += sum(per_layer) * T + L * attn * pairs + head * T
    B, S, P = st.shape
    valid = st.mask[:, 0].sum(-1).float()  # keys seen by each suffix query [B, S]
    pre = 0.0
    for i in range(layer + 1, L):
        pre += per_layer[i] * B * S + attn * float(valid.sum())
    pre += head * st.readout_row.numel()
    return K * full, K * pre


def time_graph(graph: torch.nn.Module, deltas: torch.Tensor, reps: int) -> float:
    """Median seconds per call over ``reps`` calls (after one warm-up)."""
    graph(deltas)
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        graph(deltas)
        ts.append(time.perf_counter() - t)
    ts.sort()
    return ts[len(ts) // 2]


def prefix_speedup(model, family: Family, layer: int, inputs, st: PrefixState, cfg, K: int = 17,
                   reps: int = 5, generator: torch.Generator | None = None, full: bool = True) -> dict:
    """Measured and theoretical speed-up of prefix reuse for one edit's graph (``full`` False: the
    prefix graph's step time alone; the full graph's time and the measured speed-up are NaN)."""
    g = generator or torch.Generator().manual_seed(0)
    deltas = torch.randn(K, st.h_suffix.shape[-1], generator=g) * 0.01
    t_prefix = time_graph(PrefixGraph(model, family, st, cfg), deltas, reps)
    t_full = time_graph(FullGraph(model, family, layer, inputs, st, cfg), deltas, reps) if full else float("nan")
    lens = [int(x) for x in inputs.batch.attention_mask.sum(-1)]
    f_full, f_pre = flops(model, family, layer, st, lens, K)
    measured, theory = t_full / t_prefix, f_full / f_pre
    return {"K": K, "t_full_s": t_full, "t_prefix_s": t_prefix, "speedup": measured, "flop_ratio": theory,
            "fraction_of_theory": measured / theory, "flops_full": f_full, "flops_prefix": f_pre}


def measure(model_dir: str, layer: int, n_requests: int, K: int, reps: int, quant: str, seed: int = 0,
            full: bool = True) -> dict:
    """Prefix reuse on ``n_requests`` bundled requests of one model: per-request speed-up and FLOP
    ratio (float or quantized forward graph), plus their medians. One torch thread is the caller's job."""
    import statistics

    from .forward.prefix import compute_prefix_state
    from .forward.quant import quantized_copy
    from .methods.common import prepare_context
    from .models import load_model
    from .requests import bundled_path, load_requests
    from .editing.config import ContextConfig, ObjectiveConfig
    from .editing.context import build_edit_inputs

    lm = load_model(model_dir)
    obj = ObjectiveConfig()
    g = torch.Generator().manual_seed(seed)
    ctx = prepare_context(lm, [layer], ContextConfig(), None, g)
    fwd = quantized_copy(lm.model, lm.family, layer, quant_spec(quant))
    rows = []
    for req in load_requests(bundled_path("counterfact-edit-1k.json"))[:n_requests]:
        inputs = build_edit_inputs(lm.tokenizer, req, ctx.templates, obj)
        st = compute_prefix_state(fwd, lm.family, layer, inputs)
        rows.append(prefix_speedup(fwd, lm.family, layer, inputs, st, obj, K=K, reps=reps, generator=g, full=full))
        log.info("request %s: %.2fx measured vs %.2fx FLOPs", req.case_id, rows[-1]["speedup"], rows[-1]["flop_ratio"])
    med = {k: statistics.median(r[k] for r in rows) for k in ("speedup", "flop_ratio", "fraction_of_theory",
                                                               "t_full_s", "t_prefix_s")}
    return {"model": str(model_dir), "layer": layer, "K": K, "quant": quant, "n_requests": len(rows),
            "prompt_rows": int(inputs.batch.input_ids.shape[0]), "median": med, "per_request": rows}


def format_result(res: dict) -> str:
    m = res["median"]
    return (f"prefix reuse ({res['quant']}, layer {res['layer']}, K={res['K']}, {res['n_requests']} requests, "
            f"{res['prompt_rows']} prompt rows): full {m['t_full_s']:.4f} s/step, prefix {m['t_prefix_s']:.4f} s/step, "
            f"speed-up {m['speedup']:.2f}x vs FLOP ratio {m['flop_ratio']:.2f}x = {100 * m['fraction_of_theory']:.0f}% of theory")


def cmd_bench_prefix(args) -> int:
    import json
    from pathlib import Path

    from .atomic import atomic_write_text
    from .resolve import edit_layer_for, resolve_model

    torch.set_num_threads(1)
    model_dir = resolve_model(args)
    layer = edit_layer_for(model_dir, args.layer)
    results = [measure(str(model_dir), layer, args.n, args.K, args.reps, q, full=not args.prefix_only)
               for q in args.quant.split(",")]
    for r in results:
        print(format_result(r), flush=True)
    ref = next((r["median"]["t_prefix_s"] for r in results if r["quant"] == "none"), None)
    if ref:  # the loop's step of each forward beside fp32 eager, measured in this run
        print("prefix step time / fp32 eager's: " + ", ".join(f"{r['quant']} {r['median']['t_prefix_s'] / ref:.2f}"
                                                          for r in results))
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(results, indent=1))
    return 0


def _model_args(sub, name: str, help_: str):
    """A subcommand over one model's edit graph on the first ``--n`` bundled requests."""
    sp = sub.add_parser(name, help=help_)
    add_model_args(sp)
    sp.add_argument("--layer", type=int, help="edit layer (default: the model profile's)")
    sp.add_argument("--n", type=int, default=5, help="requests (median taken)")
    sp.add_argument("--out", help="JSON output file")
    return sp


def register(sub) -> None:
    sp = _model_args(sub, "bench-prefix", "prefix-activation reuse: measured per-step speed-up vs FLOP ratio")
    sp.add_argument("--K", type=int, default=17, help="deltas per step (FZOO: 16 directions + base)")
    sp.add_argument("--reps", type=int, default=5, help="timed calls per graph (median)")
    sp.add_argument("--quant", default="none,w8a16", help="comma-separated forward graphs: none, w8a16, w8a8, bf16 "
                    "(SCHEME+head: the read-out's differences on bf16 operands too)")
    sp.add_argument("--prefix-only", action="store_true",
                    help="time the prefix graph only (the loop's step; skips the slow full graph): per-scheme step times")
    sp.set_defaults(fn=cmd_bench_prefix)


def quant_correlation(model_dir: str, layer: int, n_requests: int, K: int, hs: list[float], schemes: list[str],
                      seed: int = 0, progress: bool = False) -> dict:
    """How much of the perturbation signal a quantized edit graph keeps: the centered correlation,
    across K Rademacher perturbations of size ``h`` (units of ‖v_init‖/√d), of its losses with the
    float graph's — the trap being that a scheme can have small max error yet erase the signal."""
    import math
    import statistics

    from tqdm import tqdm

    from .forward.prefix import compute_prefix_state
    from .forward.quant import centered_correlation, quantized_copy
    from .methods.common import prepare_context
    from .models import load_model
    from .requests import bundled_path, load_requests
    from .editing.config import ContextConfig, ObjectiveConfig
    from .editing.context import build_edit_inputs

    lm = load_model(model_dir)
    obj = ObjectiveConfig()
    g = torch.Generator().manual_seed(seed)
    ctx = prepare_context(lm, [layer], ContextConfig(), None, g)
    models = {s: quantized_copy(lm.model, lm.family, layer, quant_spec(s)) for s in schemes}
    table: dict[str, dict[str, list[float]]] = {s: {str(h): [] for h in hs} for s in schemes}
    reqs = load_requests(bundled_path("counterfact-edit-1k.json"))[:n_requests]
    for req in tqdm(reqs, desc="bench-quant", unit="request", disable=not progress):
        inputs = build_edit_inputs(lm.tokenizer, req, ctx.templates, obj)
        st = compute_prefix_state(lm.model, lm.family, layer, inputs)
        ref_graph = PrefixGraph(lm.model, lm.family, st, obj)
        graphs = {s: PrefixGraph(m, lm.family, compute_prefix_state(m, lm.family, layer, inputs), obj)
                  for s, m in models.items()}
        d = st.h_suffix.shape[-1]
        for h in hs:
            D = (torch.randint(0, 2, (K, d), generator=g).float() * 2 - 1) * h * float(st.v_init.norm()) / math.sqrt(d)
            ref = ref_graph(D)[0]
            for s, gr in graphs.items():
                table[s][str(h)].append(centered_correlation(gr(D)[0], ref))
    return {"model": str(model_dir), "layer": layer, "K": K, "n_requests": n_requests,
            "median": {s: {h: statistics.median(v) for h, v in row.items()} for s, row in table.items()},
            "per_request": table}


def quant_spec(text: str):
    """A ``--schemes`` item as a :class:`~mobiedit.forward.quant.QuantConfig`: ``SCHEME`` or
    ``SCHEME+head`` (the read-out's differences on bf16 operands too, ``quant.head_matmul`` "bf16")."""
    from .forward.quant import QuantConfig

    scheme, plus, extra = text.partition("+")
    if plus and extra != "head":
        from .errors import ConfigError

        raise ConfigError(f"bad scheme {text!r}", where="--schemes", fix="write SCHEME or SCHEME+head, e.g. bf16+head")
    return QuantConfig(scheme, head_matmul="bf16" if plus else "float32")


def _sizes(text: str) -> list[float]:
    """``--h``'s comma-separated perturbation sizes, each a finite number > 0."""
    import math

    from .errors import ConfigError

    try:
        hs = [float(x) for x in text.split(",")]
    except ValueError:
        hs = []
    if not hs or not all(math.isfinite(h) and h > 0 for h in hs):
        raise ConfigError(f"--h {text!r} is not a list of sizes", where="--h",
                          fix="give comma-separated numbers > 0, e.g. --h 0.05,0.5")
    return hs


def cmd_bench_quant(args) -> int:
    import json
    from pathlib import Path

    from .atomic import atomic_write_text
    from .resolve import edit_layer_for, resolve_model

    torch.set_num_threads(1)
    hs = _sizes(args.h)  # before the model is resolved (which may build it)
    for spec in args.schemes.split(","):
        quant_spec(spec)
    model_dir = resolve_model(args)
    layer = edit_layer_for(model_dir, args.layer)
    res = quant_correlation(str(model_dir), layer, args.n, args.K, hs, args.schemes.split(","), progress=True)
    print(f"centered correlation of K={args.K} losses with the float graph (median of {args.n} requests, layer {layer})")
    print(f"{'scheme':<11}" + "".join(f"{'h=' + str(h):>12}" for h in hs))
    for s, row in res["median"].items():
        print(f"{s:<11}" + "".join(f"{row[str(h)]:>12.4f}" for h in hs))
    if args.out:
        atomic_write_text(Path(args.out), json.dumps(res, indent=1))
    return 0


def register_quant(sub) -> None:
    sp = _model_args(sub, "bench-quant", "perturbation signal kept by quantized edit graphs (centered correlation)")
    sp.add_argument("--K", type=int, default=32, help="perturbations per request")
    sp.add_argument("--h", default="0.001,0.05,0.5", help="comma-separated perturbation sizes, units of ||v_init||/sqrt(d), e.g. 0.05,0.5")
    sp.add_argument("--schemes", default="w8a16,w8a8", help="comma-separated quantization schemes to compare; "
                    "SCHEME+head also runs the read-out's differences on bf16 operands (quant.head_matmul bf16)")
    sp.set_defaults(fn=cmd_bench_quant)
