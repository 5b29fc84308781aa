"""Export benchmark: decode speed of a bundle vs PyTorch eager fp32, bundle size vs the fp32
checkpoint, export time — on a 0.5B-parameter Qwen2 shape with random weights (or any model folder).

Run: ``python -m mobiedit.export.bench --out runs/bench_export`` (one thread everywhere). Not a test:
on 2 shared cores the 0.5B export takes tens of minutes and ~15 GB of RAM.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import torch

from mobiedit.atomic import atomic_dir, atomic_write_text
from mobiedit.rss import peak_rss_mb

from .config import EditSetup, EditShapes, ExportConfig, InferenceShapes, LowerConfig, QuantizeConfig

log = logging.getLogger(__name__)

#: the 0.5B Qwen2 shape (Qwen2-0.5B's dimensions, untied embeddings, random init)
QWEN2_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, vocab_size=151936)


def make_random_model(path: Path, config: dict | None = None, seed: int = 0) -> Path:
    """Save a random-init Qwen2 of ``config`` (default :data:`QWEN2_05B`) with a small BPE tokenizer."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from mobiedit.factlm.train import train_tokenizer
    from mobiedit.requests import bundled_path

    recs = json.loads(bundled_path("counterfact-edit-1k.json").read_text())
    tok = train_tokenizer([r["prompt"] + " " + r["ground_truth"] for r in recs], 2048)
    cfg = Qwen2Config(**(config or QWEN2_05B), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id, max_position_embeddings=4096)
    with torch.random.fork_rng(devices=[]):  # HF init draws from the global generator: scoped here
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(cfg)
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    return path


def bench_config(runtime: str = "executorch", scheme: str = "8da8w", float_head: bool = False) -> ExportConfig:
    """Bundle settings of the benchmark: the int8 configuration (8da8w, delta-decomposed edit
    program, int8 LM head and embedding unless ``float_head``), edit shapes sized for a 151k
    vocabulary, a 2-draw correlation check (each fp32 edit-program call is ~1 min on one core)."""
    return ExportConfig(inference=InferenceShapes(max_seq_len=128, prefill_chunk=16, slots=8),
                        edit_shapes=EditShapes(K=17, rows=22, suffix=8, prefix=32, targets=32, kl=1),
                        quant=QuantizeConfig(scheme=scheme, quantize_lm_head=not float_head,
                                             quantize_embedding=not float_head, check_draws=2),
                        lower=LowerConfig(runtime=runtime), edit=EditSetup(layer=1, stats_limit=200))


def eager_decode_tps(model_dir: Path, prompt_ids: list[int], n: int) -> float:
    """Decode tokens/s of the HF model in PyTorch eager fp32 (KV cache, greedy, one thread)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        past, tok = out.past_key_values, out.logits[0, -1].argmax().view(1, 1)
        t0 = time.perf_counter()
        for _ in range(n):
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[0, -1].argmax().view(1, 1)
        return n / (time.perf_counter() - t0)


def bundle_decode_tps(bundle_dir: Path, prompt_ids: list[int], n: int) -> float:
    """Decode tokens/s of a bundle's ``decode`` program after one ``prefill`` (one thread)."""
    from .bundle import load_bundle
    from .generate import CacheShape, prefill

    b = load_bundle(bundle_dir)
    m, d = b.manifest, b.manifest["dims"]
    shape = CacheShape(d["num_layers"], d["num_kv_heads"], m["shapes"]["max_seq_len"], d["head_dim"],
                       m["shapes"]["prefill_chunk"])
    slot_u, slot_w = b.slots()
    slots = {"slot_u": slot_u, "slot_w": slot_w}
    cache = shape.empty()
    logits = prefill(b.program("prefill"), prompt_ids, cache, shape, slots)
    dec, pos = b.program("decode"), len(prompt_ids)
    t0 = time.perf_counter()
    for _ in range(n):
        tok = int(torch.argmax(logits))
        out = dec.run({"tokens": torch.tensor([[tok]]), "start": torch.tensor([pos]), "logit_index": torch.tensor([0]),
                       "kv_cache": cache, **slots})
        cache[:, :, pos] = out["new_kv"][:, :, 0]
        logits, pos = out["logits"][0], pos + 1
    return n / (time.perf_counter() - t0)


def bench_export(out_dir: str | Path, model_dir: str | Path | None = None, cfg: ExportConfig | None = None,
                 decode_tokens: int = 32) -> dict:
    """Export ``model_dir`` (default: a random 0.5B Qwen2 written under ``out_dir``) and measure
    decode tokens/s (bundle vs eager fp32), bundle size vs fp32 safetensors, export time.
    Writes ``out_dir/bench.json`` and returns the figures."""
    from .bundle import export_bundle, load_bundle

    torch.set_num_threads(1)
    out_dir = Path(out_dir)
    model_dir = Path(model_dir) if model_dir else out_dir / "qwen2-0.5b-random"
    if not (model_dir / "config.json").is_file():
        make_random_model(model_dir)
    cfg = cfg or bench_config()
    head = "qhead" if cfg.quant.quantize_lm_head else "fhead"
    bundle = out_dir / f"bundle-{cfg.lower.runtime}-{cfg.quant.scheme}-{head}"
    t0 = time.perf_counter()
    export_bundle(model_dir, bundle, cfg)
    export_s = time.perf_counter() - t0
    m = load_bundle(bundle).manifest
    fp32_bytes = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    programs = sum(f["bytes"] for n, f in m["files"].items() if n != "keystats.safetensors")
    total = sum(f["bytes"] for f in m["files"].values())
    ids = list(range(3, 3 + 16))
    tps_bundle = bundle_decode_tps(bundle, ids, decode_tokens)
    tps_eager = eager_decode_tps(model_dir, ids, decode_tokens)
    figures = {
        "model": str(model_dir), "runtime": cfg.lower.runtime, "quantization": m["quantization"],
        "edit_quantization": m["edit_quantization"], "export_seconds": round(export_s, 1),
        "fp32_safetensors_bytes": fp32_bytes, "bundle_bytes": total, "bundle_programs_bytes": programs,
        "size_ratio": round(total / fp32_bytes, 3), "size_ratio_programs_only": round(programs / fp32_bytes, 3),
        "decode_tokens_per_s_bundle": round(tps_bundle, 2), "decode_tokens_per_s_eager_fp32": round(tps_eager, 2),
        "speedup": round(tps_bundle / tps_eager, 2), "checks": m["checks"],
        "peak_rss_gb": round(peak_rss_mb() * 2**20 / 1e9, 2),
    }
    atomic_write_text(out_dir / "bench.json", json.dumps(figures, indent=1))
    log.info("bench: %s", figures)
    return figures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mobiedit.export.bench", description=__doc__)
    p.add_argument("--out", required=True)
    p.add_argument("--model", help="model folder (default: random 0.5B Qwen2 under --out)")
    p.add_argument("--runtime", default="executorch", choices=("executorch", "onnxruntime"))
    p.add_argument("--quant", default="8da8w")
    p.add_argument("--decode-tokens", type=int, default=32)
    p.add_argument("--float-head", action="store_true", help="keep the LM head and embedding float")
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("torch", "onnxscript", "onnx_ir", "torchao", "executorch", "transformers"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    print(json.dumps(bench_export(a.out, a.model, bench_config(a.runtime, a.quant, a.float_head), a.decode_tokens), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
