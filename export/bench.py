"""Export benchmark: decode speed of a bundle vs PyTorch eager fp32 (measured in one process), bundle
size vs the fp32 checkpoint, export time — on a 0.5B-parameter Qwen2 shape with random weights, or
any model folder / checkpoint name.

Run: ``python -m mobiedit.export.bench --out runs/bench_export`` (export + measure), or measure an
exported bundle against its source model: ``mobiedit bench-export --bundle B --model smollm2-135m
--out DIR`` (same flags). One thread everywhere. Not a test: on 2 shared cores the 0.5B export takes
tens of minutes and ~15 GB of RAM.
"""
from __future__ import annotations

import argparse
import json
import logging
import time
from pathlib import Path

import torch

from mobiedit.atomic import atomic_dir, atomic_write_text
from mobiedit.errors import ConfigError
from mobiedit.rss import peak_rss_mb

from .config import EditSetup, EditShapes, ExportConfig, InferenceShapes, LowerConfig, QuantizeConfig

log = logging.getLogger(__name__)

#: the 0.5B Qwen2 shape (Qwen2-0.5B's dimensions, untied embeddings, random init)
#: the prompt both sides decode after (tokenized by the model's own tokenizer)
BENCH_PROMPT = "The Eiffel Tower is located in the city of"
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


def _hf_model(model_dir: Path):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()


def eager_decode_tps(model_dir: Path, prompt_ids: list[int], n: int, warmup: int = 2, model=None) -> float:
    """Decode tokens/s of the HF model in PyTorch eager fp32 (KV cache, greedy, one thread): ``n``
    single-token steps after the prompt and ``warmup`` untimed steps."""
    model = model if model is not None else _hf_model(model_dir)
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
        past, tok = out.past_key_values, out.logits[0, -1].argmax().view(1, 1)
        for i in range(warmup + n):
            if i == warmup:
                t0 = time.perf_counter()
            out = model(input_ids=tok, past_key_values=past, use_cache=True)
            past, tok = out.past_key_values, out.logits[0, -1].argmax().view(1, 1)
        return n / (time.perf_counter() - t0)


def eager_generate_tps(model, prompt_ids: list[int], n: int) -> float:
    """New tokens/s of HF ``generate`` (greedy, exactly ``n`` new tokens, prompt prefill included)."""
    ids = torch.tensor([prompt_ids])
    with torch.no_grad():
        model.generate(ids, max_new_tokens=2, min_new_tokens=2, do_sample=False)  # warm-up
        t0 = time.perf_counter()
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=n, min_new_tokens=n, do_sample=False)
        return n / (time.perf_counter() - t0)


def bundle_decode_tps(bundle_dir: Path, prompt_ids: list[int], n: int, warmup: int = 2) -> float:
    """Decode tokens/s of a bundle's ``decode`` program after one ``prefill`` (one thread): ``n``
    timed calls after ``warmup`` untimed ones."""
    from .bundle import load_bundle
    from .generate import CacheShape, prefill

    b = load_bundle(bundle_dir)
    m, d = b.manifest, b.manifest["dims"]
    shape = CacheShape(d["num_layers"], d["num_kv_heads"], m["shapes"]["max_seq_len"], d["head_dim"],
                       m["shapes"]["prefill_chunk"])
    if len(prompt_ids) + warmup + n > shape.max_seq_len:
        raise ConfigError(f"prompt {len(prompt_ids)} + {warmup + n} decode steps exceed the bundle's max_seq_len "
                          f"{shape.max_seq_len}", where="--decode-tokens", fix="decode fewer tokens")
    slot_u, slot_w = b.slots()
    slots = {"slot_u": slot_u, "slot_w": slot_w}
    cache = shape.empty()
    logits = prefill(b.program("prefill"), prompt_ids, cache, shape, slots)
    dec, pos = b.program("decode"), len(prompt_ids)
    for i in range(warmup + n):
        if i == warmup:
            t0 = time.perf_counter()
        tok = int(torch.argmax(logits))
        out = dec.run({"tokens": torch.tensor([[tok]]), "start": torch.tensor([pos]), "logit_index": torch.tensor([0]),
                       "kv_cache": cache, **slots})
        cache[:, :, pos] = out["new_kv"][:, :, 0]
        logits, pos = out["logits"][0], pos + 1
    return n / (time.perf_counter() - t0)


def bundle_generate_tps(bundle_dir: Path, prompt: str, n: int) -> float:
    """New tokens/s of ``mobiedit run``'s path (:func:`~.generate.greedy_tokens`: prefill chunks +
    decode, plain prompt), exactly ``n`` new tokens (no eos stop), after an untimed warm-up call."""
    from .bundle import load_bundle
    from .generate import CacheShape, greedy_tokens

    b = load_bundle(bundle_dir)
    m, d = b.manifest, b.manifest["dims"]
    shape = CacheShape(d["num_layers"], d["num_kv_heads"], m["shapes"]["max_seq_len"], d["head_dim"],
                       m["shapes"]["prefill_chunk"])
    ids = b.tokenizer()(prompt)["input_ids"]
    u, w = b.slots()
    greedy_tokens(b.program("prefill"), b.program("decode"), ids, 2, shape, u, w)  # warm-up
    t0 = time.perf_counter()
    got = greedy_tokens(b.program("prefill"), b.program("decode"), ids, n, shape, u, w, eos_id=None)
    return len(got) / (time.perf_counter() - t0)


def measure_bundle(bundle: str | Path, model_dir: str | Path, prompt: str = BENCH_PROMPT,
                   decode_tokens: int = 32) -> dict:
    """Size and speed figures of an exported ``bundle`` against the fp32 HF folder ``model_dir`` it
    came from, both measured in this one process (one thread each, the same prompt): bundle size /
    fp32 safetensors, decode tokens/s (bundle ``decode`` program vs eager HF with KV cache), and
    end-to-end new tokens/s (bundle prefill + decode vs HF ``generate``)."""
    from transformers import AutoTokenizer

    from .bundle import load_bundle

    bundle, model_dir = Path(bundle), Path(model_dir)
    m = load_bundle(bundle).manifest
    fp32_bytes = sum(p.stat().st_size for p in model_dir.glob("*.safetensors"))
    programs = sum(f["bytes"] for n, f in m["files"].items() if n.endswith((".pte", ".onnx")))
    total = sum(f["bytes"] for f in m["files"].values())
    ids = AutoTokenizer.from_pretrained(model_dir)(prompt)["input_ids"]
    tps_bundle = bundle_decode_tps(bundle, ids, decode_tokens)
    gen_bundle = bundle_generate_tps(bundle, prompt, decode_tokens)
    model = _hf_model(model_dir)
    tps_eager = eager_decode_tps(model_dir, ids, decode_tokens, model=model)
    gen_eager = eager_generate_tps(model, ids, decode_tokens)
    return {
        "bundle": str(bundle), "model": str(model_dir), "runtime": m["runtime"], "quantization": m["quantization"],
        "edit_quantization": m["edit_quantization"], "max_seq_len": m["shapes"]["max_seq_len"],
        "prompt": prompt, "prompt_tokens": len(ids), "decode_tokens": decode_tokens,
        "fp32_safetensors_bytes": fp32_bytes, "bundle_bytes": total, "bundle_programs_bytes": programs,
        "size_ratio": round(total / fp32_bytes, 3), "size_ratio_programs_only": round(programs / fp32_bytes, 3),
        "decode_tokens_per_s_bundle": round(tps_bundle, 2), "decode_tokens_per_s_eager_fp32": round(tps_eager, 2),
        "speedup": round(tps_bundle / tps_eager, 2),
        "generate_tokens_per_s_bundle": round(gen_bundle, 2), "generate_tokens_per_s_eager_fp32": round(gen_eager, 2),
        "generate_speedup": round(gen_bundle / gen_eager, 2),
        "checks": m["checks"], "peak_rss_gb": round(peak_rss_mb() * 2**20 / 1e9, 2),
    }


def bench_export(out_dir: str | Path, model_dir: str | Path | None = None, cfg: ExportConfig | None = None,
                 decode_tokens: int = 32, prompt: str = BENCH_PROMPT) -> dict:
    """Export ``model_dir`` (default: a random 0.5B Qwen2 written under ``out_dir``) and measure it
    (:func:`measure_bundle`) plus the export time. Writes ``out_dir/bench.json``; returns the figures."""
    from .bundle import export_bundle

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
    figures = {"export_seconds": round(time.perf_counter() - t0, 1),
               **measure_bundle(bundle, model_dir, prompt, decode_tokens)}
    atomic_write_text(out_dir / "bench.json", json.dumps(figures, indent=1))
    log.info("bench: %s", figures)
    return figures


def bench_bundle(out_dir: str | Path, bundle: str | Path, model_dir: str | Path, decode_tokens: int = 32,
                 prompt: str = BENCH_PROMPT) -> dict:
    """:func:`measure_bundle` of an already exported bundle; writes ``out_dir/bench.json``."""
    torch.set_num_threads(1)
    figures = measure_bundle(bundle, model_dir, prompt, decode_tokens)
    atomic_write_text(Path(out_dir) / "bench.json", json.dumps(figures, indent=1))
    log.info("bench: %s", figures)
    return figures


def run(a: argparse.Namespace) -> dict:
    """Run the benchmark for parsed flags (:func:`mobiedit.export.cli.bench_arguments`); returns the figures."""
    from mobiedit.checkpoints import resolve_model_arg

    model = resolve_model_arg(a.model) if a.model else None
    if a.bundle:
        if model is None:
            raise ConfigError("--bundle needs the model it was exported from", where="--model",
                              fix="pass --model DIR_OR_NAME (its fp32 safetensors are the size and speed baseline)")
        return bench_bundle(a.out, a.bundle, model, a.decode_tokens, a.prompt or BENCH_PROMPT)
    return bench_export(a.out, model, bench_config(a.runtime, a.quant, a.float_head), a.decode_tokens,
                        a.prompt or BENCH_PROMPT)


def main(argv: list[str] | None = None) -> int:
    from .bench_flags import bench_arguments

    p = argparse.ArgumentParser(prog="python -m mobiedit.export.bench", description=__doc__)
    bench_arguments(p)
    a = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    for noisy in ("torch", "onnxscript", "onnx_ir", "torchao", "executorch", "transformers"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    print(json.dumps(run(a), indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
