"""Regenerate the exported-bundle fixture of the JVM tests (run by a developer, output committed).

Builds a tiny random Llama (hidden 64, intermediate 128, 3 layers, 4 heads / 2 KV heads) around the
tokenizer fixture of make_tokenizer_fixture.py, exports it with the real exporter
(`mobiedit export`, ExecuTorch, the shipped 8da8w scheme) and writes
app/src/test/resources/fixtures/exported_bundle/:

  manifest.json          the exporter's manifest verbatim (its edit recipe included), except
                         files["model.pte"], which describes the small placeholder below (the
                         real .pte is ~0.6 MB)
  model.pte              placeholder text (its real sha256/size are in program_io.json)
  tokenizer.json, keystats.safetensors, journal/journal.jsonl   as exported (checksums unchanged)
  program_io.json        what the real model.pte declares: per method, dtype and shape of each
                         input and output (ExecuTorch MethodMeta), and the original file's sha256
  edit_case.json         one edit through the exporter's host code and the real programs
                         (with ``c_rows``: the direction of the ``rows`` write rule on the same keys):
                         mobiedit.export.packing.pack_edit's feeds, the prefix program's keys /
                         values (ExecuTorch), wd_scale, C^-1 k_bar and the rank-one factors of
                         mobiedit.export.ops for a given delta; the edit method's losses and
                         correct [K, B] (exact counts of argmax targets) at deltas 0 and that delta

ExportedBundleTest checks the app's manifest parsing, program calls and host-side packing against it.
Usage (from the repo root, with the project venv; ~2-4 min on one core):
  OMP_NUM_THREADS=1 .venv/bin/python android_demo/tools/make_bundle_fixture.py [--bundle DIR] [--keep DIR]
--bundle reuses an already exported bundle made by this script; --keep leaves the export in DIR.
"""
from __future__ import annotations

import argparse
import base64
import hashlib
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

torch.set_num_threads(1)

HERE = Path(__file__).resolve().parents[1]
FIXTURES = HERE / "app/src/test/resources/fixtures"
OUT = FIXTURES / "exported_bundle"
PAD, BOS, EOS = "<pad>", "<s>", "</s>"
# Small but real shapes (the rows fit ROME's 21 context templates + the KL prompt).
EXPORT_ARGS = ["--quant", "8da8w", "--layer", "1", "--max-seq-len", "64", "--prefill-chunk", "8",
               "--slots", "2", "--edit-k", "5", "--edit-rows", "22", "--edit-suffix", "32",
               "--edit-prefix", "64", "--edit-targets", "256", "--edit-kl", "1", "--stats-limit", "200"]
REQUEST = ("Danielle Darrieux", "The mother tongue of {} is", "English")
ROWS_RIDGE = 1e-2  # the rows write rule's direction is checked at the exporter's default ridge
PLACEHOLDER = b"placeholder for the exported model.pte (see program_io.json); not loadable\n"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def tiny_model(folder: Path) -> None:
    from tokenizers import Tokenizer
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    tk = Tokenizer.from_file(str(FIXTURES / "tokenizer.json"))
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=BOS, eos_token=EOS, pad_token=PAD)
    torch.manual_seed(0)
    cfg = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3, num_attention_heads=4,
                      num_key_value_heads=2, vocab_size=tk.get_vocab_size(), max_position_embeddings=256,
                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    LlamaForCausalLM(cfg).save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)


def export(model: Path, bundle: Path) -> None:
    cmd = [sys.executable, "-c", "import sys; from mobiedit.cli import main; sys.exit(main())", "export",
           "--model", str(model), "--out", str(bundle), *EXPORT_ARGS]
    print("running", " ".join(cmd[3:]), flush=True)
    subprocess.run(cmd, check=True)


#: ExecuTorch ScalarType codes of the programs' tensors
DTYPES = {0: "uint8", 3: "int32", 4: "int64", 6: "float32", 11: "bool"}


def method_io(pte: Path) -> dict:
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(pte)
    out = {}
    for name in sorted(program.method_names):
        meta = program.metadata(name)
        ins = [meta.input_tensor_meta(i) for i in range(meta.num_inputs())]
        outs = [meta.output_tensor_meta(i) for i in range(meta.num_outputs())]
        out[name] = {"inputs": [{"dtype": DTYPES.get(int(t.dtype()), str(t.dtype())), "shape": list(t.sizes())}
                                for t in ins],
                     "outputs": [{"dtype": DTYPES.get(int(t.dtype()), str(t.dtype())), "shape": list(t.sizes())}
                                 for t in outs]}
    return out


def tensor(t: torch.Tensor, values: bool = False) -> dict:
    """dtype, shape and sha256 of the raw little-endian bytes; with ``values`` also the bytes
    themselves (base64). Program tensors are float32 or int64 only (docs/bundle_format.md)."""
    kind = {torch.float32: "float32", torch.int64: "int64"}[t.dtype]
    raw = t.contiguous().numpy().tobytes()
    out = {"dtype": kind, "shape": list(t.shape), "sha256": sha256(raw)}
    if values:
        out["b64"] = base64.b64encode(raw).decode("ascii")
    return out


def edit_case(bundle_dir: Path) -> dict:
    from mobiedit.export import load_bundle
    from mobiedit.export.verify import edit_shapes_of
    from mobiedit.export.packing import edit_feed, pack_edit
    from mobiedit.requests import requests_from_cli
    from mobiedit.editing.config import ObjectiveConfig
    from mobiedit.editing.context import build_edit_inputs
    from mobiedit.zo.rank_one import rank_one_factors
    from mobiedit.editing.update import bundle_direction

    b = load_bundle(bundle_dir)
    m = b.manifest
    req = requests_from_cli(REQUEST[0], REQUEST[1], REQUEST[2])[0]
    objective = ObjectiveConfig(**m["edit"]["objective"])
    inputs = build_edit_inputs(b.tokenizer(), req, m["edit"]["templates"], objective)
    packed = pack_edit(inputs, edit_shapes_of(m), objective)
    slot_u, slot_w = b.slots()
    pout = b.program("prefix").run({**packed.prefix_feed, "slot_u": slot_u, "slot_w": slot_w})
    feed = edit_feed(packed, pout)
    keys, values = pout["keys"], pout["values"]
    v_init = values[0]
    d = v_init.shape[0]
    g = torch.Generator().manual_seed(1)
    delta = (torch.randn(d, generator=g) * 0.1 * float(v_init.norm()) / math.sqrt(d)).float()
    c = bundle_direction(b.keystats()["c_inv"], keys[: packed.n_rewrite])
    c_rows = bundle_direction(b.keystats()["c_inv"], keys[: packed.n_rewrite], "rows", ROWS_RIDGE)
    u, w = rank_one_factors(keys[0].numpy(), (v_init + delta).numpy(), v_init.numpy(), c.numpy())
    K = m["shapes"]["edit_K"]
    deltas = torch.zeros(K, d)
    deltas[1] = delta
    eout = b.program("edit").run({**feed, "deltas": deltas})
    f32 = torch.float32
    return {
        "request": {"subject": req.subject, "prompt": REQUEST[1], "target_new": req.target_new},
        "n_rows": packed.n_rows, "n_rewrite": packed.n_rewrite, "target_len": packed.target_len,
        "prefix_feed": {k: tensor(v, v.numel() <= 1024) for k, v in packed.prefix_feed.items()},
        "static_feed": {k: tensor(v, v.numel() <= 1024) for k, v in packed.static_feed.items()},
        "prefix_outputs": {k: tensor(v, k in ("keys", "values")) for k, v in pout.items()},
        "wd_scale": tensor(feed["wd_scale"], True), "c": tensor(c.to(f32), True),
        "c_rows": tensor(c_rows.to(f32), True), "rows_ridge": ROWS_RIDGE,
        "delta": tensor(delta, True), "u": tensor(torch.from_numpy(u).to(f32), True),
        "w": tensor(torch.from_numpy(w).to(f32), True),
        "edit_losses": eout["losses"].tolist(), "edit_correct": eout["correct"].tolist(),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, help="reuse this exported bundle (skip the export)")
    ap.add_argument("--keep", type=Path, help="export into this folder and keep it")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        bundle = args.bundle
        if bundle is None:
            model = Path(tmp) / "tiny_llama"
            tiny_model(model)
            bundle = args.keep or Path(tmp) / "bundle"
            export(model, bundle)
        manifest = json.loads((bundle / "manifest.json").read_text())
        pte = bundle / "model.pte"
        io = {"executorch_version": _version("executorch"), "export_args": EXPORT_ARGS,
              "model_pte": {"sha256": sha256(pte.read_bytes()), "bytes": pte.stat().st_size},
              "methods": method_io(pte)}
        case = edit_case(bundle)
        if OUT.exists():
            shutil.rmtree(OUT)
        (OUT / "journal").mkdir(parents=True)
        for name in manifest["files"]:
            if name != "model.pte":
                shutil.copyfile(bundle / name, OUT / name)
        shutil.copyfile(bundle / "journal" / "journal.jsonl", OUT / "journal" / "journal.jsonl")
        (OUT / "model.pte").write_bytes(PLACEHOLDER)
        manifest["files"]["model.pte"] = {"sha256": sha256(PLACEHOLDER), "bytes": len(PLACEHOLDER)}
        (OUT / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True))
        (OUT / "program_io.json").write_text(json.dumps(io, indent=1, sort_keys=True) + "\n")
        (OUT / "edit_case.json").write_text(json.dumps(case, indent=1) + "\n")
    mask = io["methods"]["edit"]["inputs"][manifest["programs"]["edit"]["inputs"].index("mask")]["dtype"]
    print(f"wrote {OUT}: programs {sorted(manifest['programs'])}, edit mask {mask}, "
          f"correct at delta 0: {case['edit_correct'][0][:case['n_rewrite']]} (target_len {case['target_len']})")


def _version(dist: str) -> str:
    from importlib.metadata import version

    return version(dist)


if __name__ == "__main__":
    main()
