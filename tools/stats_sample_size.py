"""How many tokens the key statistics need: the rank-one write's leak into held-out text.

ROME's direction ``w = C⁻¹k / (kᵀC⁻¹k)`` is the one that changes a key ``k`` by one unit while
changing the average key of natural text least: it minimises ``wᵀ C w``. That holds for the true
``C``; an estimate from few tokens lets ``w`` lean on directions the sample saw too little of.
This tool estimates ``C`` from the first ``B`` tokens of the Wikipedia statistics corpus for each
``B`` in ``--budgets``, and scores each ``w`` by its leak on held-out text,
``wᵀ C_held w`` (``C_held`` from the Lee corpus, the text of the held-out perplexity; never used
for statistics): the mean squared change of a held-out token's edited-matrix output per unit of
the edit's value change. The subjects' keys are the plain rewrite prompts' keys of the model's
known requests (those the benches edit)::

    python tools/stats_sample_size.py --model gemma3-270m --n 20 --out results/stats_sample_size/gemma.json
    python tools/stats_sample_size.py --model smollm2-135m --n 20 --out results/stats_sample_size/smollm2.json
    python tools/stats_sample_size.py --plot results/stats_sample_size/*.json --png results/stats_sample_size/leak.png

Each run writes its JSON and a PNG beside it; ``--plot`` draws several runs' reports in one figure.
"""
from __future__ import annotations

import argparse
import json
import logging
import time

import torch

log = logging.getLogger("stats_sample_size")


def leak_report(cs: dict[int, torch.Tensor], c_held: torch.Tensor, keys: torch.Tensor, ridge: float) -> list[dict]:
    """Per budget: the held-out leak ``wᵀC_held w`` of each key's ROME direction (median, mean),
    its ratio to the largest budget's, and the cosine of ``w`` with the largest budget's ``w``."""
    from mobiedit.editing.update import solve_c

    ws = {}
    for b, c in cs.items():
        ck = solve_c(c, keys.T.contiguous(), ridge).double()  # [d, n]
        ws[b] = ck / (keys.double() * ck.T).sum(1)  # scaled so that wᵀk = 1
    top = max(cs)
    held = c_held.double()

    def leak(w: torch.Tensor) -> torch.Tensor:
        return torch.einsum("in,ij,jn->n", w, held, w)

    ref = leak(ws[top])
    out = []
    for b, w in ws.items():
        lk = leak(w)
        cos = torch.nn.functional.cosine_similarity(w, ws[top], dim=0)
        out.append({"budget_tokens": b, "leak_median": float(lk.median()), "leak_mean": float(lk.mean()),
                    "leak_ratio_to_largest_median": float((lk / ref).median()),
                    "cos_w_with_largest_median": float(cos.median()), "cos_w_with_largest_min": float(cos.min())})
    return out


def plot(reports: list[dict], png: str) -> None:
    """The leak (÷ the largest budget's) and the cosine with the largest budget's ``w`` against
    the statistics' tokens, one line per report, written atomically to ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from mobiedit.atomic import save_png
    from mobiedit.stats_corpus import STATS_TOKENS

    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    for rep in reports:
        name = rep["model"].rstrip("/").split("/")[-1].split("-")[0] + f" L{rep['layer']} (d={rep['d_in']})"
        xs = [r["budget_tokens"] for r in rep["rows"]]
        axes[0].plot(xs, [r["leak_ratio_to_largest_median"] for r in rep["rows"]], "o-", label=name)
        axes[1].plot(xs, [r["cos_w_with_largest_median"] for r in rep["rows"]], "o-", label=name)
    for ax in axes:  # the shipped size
        ax.axvline(STATS_TOKENS, color="grey", ls=":", lw=1)
    axes[0].set(xscale="log", xlabel="tokens behind C", ylabel="held-out leak wᵀC_held w (÷ largest; median)",
                title="the write's leak into held-out text")
    axes[1].set(xscale="log", xlabel="tokens behind C", ylabel="cos(w, w at the largest C) (median)",
                title="ROME's direction C⁻¹k")
    ticks = [r["budget_tokens"] for r in reports[0]["rows"]]
    for ax in axes:
        ax.minorticks_off()
        ax.set_xticks(ticks, [f"{t // 1000}k" for t in ticks])
    axes[0].legend(fontsize=8)
    save_png(fig, png)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", help="local HF folder or checkpoint name")
    p.add_argument("--n", type=int, default=20, help="subject keys: the first N of the model's known requests")
    p.add_argument("--budgets", default="32768,65536,131072,262144,0",
                   help="statistics sizes in tokens; 0 = the whole corpus")
    p.add_argument("--out", help="write the report here as JSON (and a PNG beside it)")
    p.add_argument("--plot", nargs="+", metavar="JSON", help="draw these reports into --png and exit")
    p.add_argument("--png", help="the figure of --plot")
    args = p.parse_args()
    if args.plot:
        if not args.png:
            p.error("--plot needs --png FILE")
        plot([json.loads(open(f, encoding="utf-8").read()) for f in args.plot], args.png)
        print(f"wrote {args.png}")
        return
    if not args.model:
        p.error("--model is required (or --plot)")
    logging.basicConfig(level=logging.INFO, format="%(message)s")

    from mobiedit.atomic import atomic_write_text
    from mobiedit.checkpoints import resolve_model_arg
    from mobiedit.corpora import chunk_texts, heldout_texts, wikipedia_texts
    from mobiedit.editing.compute_k import keys_at_subject
    from mobiedit.editing.stats import second_moment_counted
    from mobiedit.models import load_model
    from mobiedit.requests import load_requests
    from mobiedit.resolve import edit_layer_for, method_config, request_file
    from mobiedit.stats_corpus import STATS_MAX_LEN

    torch.set_num_threads(1)
    model_dir = resolve_model_arg(args.model)
    layer = edit_layer_for(model_dir, None)
    cfg = method_config("rome", layer, None, 0, model_dir)
    lm = load_model(model_dir)
    reqs = load_requests(request_file(None, model_dir))[: args.n]
    keys = torch.cat([keys_at_subject(lm.model, lm.family, layer, lm.tokenizer, [r.rewrite_prompt], r.subject)[0]
                      for r in reqs])
    wiki = wikipedia_texts()
    cs: dict[int, torch.Tensor] = {}
    acc, n, done = None, 0, 0  # one pass: each budget's chunks are a prefix of the next's (packing keeps order)
    for b in sorted((int(x) for x in args.budgets.split(",")), key=lambda x: x or float("inf")):
        t0 = time.time()
        texts = chunk_texts(lm.tokenizer, wiki, STATS_MAX_LEN, pack=True, budget=b or None)
        c, m = second_moment_counted(lm.model, lm.family, layer, lm.tokenizer, texts[done:])
        acc = c.double() * m if acc is None else acc + c.double() * m
        n, done = n + m, len(texts)
        cs[n] = (acc / n).float()
        log.info("budget %s: C from %d tokens (%d texts; %.0f s)", b or "all", n, done, time.time() - t0)
    held = chunk_texts(lm.tokenizer, heldout_texts(), STATS_MAX_LEN, pack=True)
    c_held, n_held = second_moment_counted(lm.model, lm.family, layer, lm.tokenizer, held)
    rows = leak_report(cs, c_held, keys, cfg.mom2_ridge)
    rep = {"model": str(model_dir), "layer": layer, "d_in": int(keys.shape[1]), "keys": len(reqs),
           "heldout_tokens": n_held, "mom2_ridge": cfg.mom2_ridge, "rows": rows}
    print(f"{'tokens':>8} {'leak (median)':>14} {'÷ largest':>10} {'cos w':>7} {'cos min':>8}")
    for r in rows:
        print(f"{r['budget_tokens']:>8} {r['leak_median']:>14.4g} {r['leak_ratio_to_largest_median']:>10.3f} "
              f"{r['cos_w_with_largest_median']:>7.3f} {r['cos_w_with_largest_min']:>8.3f}")
    if args.out:
        atomic_write_text(args.out, json.dumps(rep, indent=1) + "\n")
        plot([rep], str(args.out).rsplit(".", 1)[0] + ".png")


if __name__ == "__main__":
    main()
