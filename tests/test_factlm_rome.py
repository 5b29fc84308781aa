"""The small fact LM knows its facts, and backprop ROME edits it at the subject; edit --out +
eval on the saved folder reproduces the in-memory numbers exactly."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from mobiedit.evaluate import aggregate
from mobiedit.factlm import EDIT_LAYER
from mobiedit.models import load_model
from mobiedit.requests import bundled_path, load_requests
from mobiedit.editing.config import ROMEConfig
from mobiedit.session import edit_independent, prepare

N_EDITS = 12


@pytest.fixture(scope="module")
def lm(small_fact_lm):
    return load_model(small_fact_lm)


def test_fact_lm_is_a_plain_hf_folder(small_fact_lm):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    for name in ("config.json", "model.safetensors", "tokenizer.json"):
        assert (small_fact_lm / name).is_file()
    m = AutoModelForCausalLM.from_pretrained(small_fact_lm, local_files_only=True)
    t = AutoTokenizer.from_pretrained(small_fact_lm, local_files_only=True)
    assert type(m).__name__ == "LlamaForCausalLM" and len(t) == m.config.vocab_size


def test_fact_lm_knows_its_facts(small_fact_lm):
    report = json.loads((small_fact_lm / "factlm.json").read_text())["report"]
    for kind in ("prompt", "rephrase", "locality"):
        assert report[kind]["whole"] >= 0.9, report
    assert json.loads((small_fact_lm / "factlm.json").read_text())["edit_layer"] == EDIT_LAYER["small"]


def test_rome_edits_at_the_subject(lm):
    reqs = load_requests(bundled_path("counterfact-edit-1k.json"))[:N_EDITS]
    cfg = ROMEConfig(layer=EDIT_LAYER["small"])
    ctx = prepare(lm, cfg, seed=0)
    before = lm.model.state_dict()[f"model.layers.{EDIT_LAYER['small']}.mlp.down_proj.weight"].clone()
    recs = edit_independent(lm, reqs, cfg, ctx, progress=False)
    agg = aggregate([r.scores for r in recs])
    # Measured on the small preset (30 edits, layer 0): efficacy 96.2, generalization 92.6,
    # locality 96.7 (docs/fact_lm.md); 12 edits here, so the bounds leave room for 1-2 misses.
    assert agg["efficacy_acc"] >= 80, agg
    assert agg["generalization_acc"] >= 70, agg
    assert agg["locality_acc"] >= 85, agg
    # independent edits restore the weights bit-exactly
    assert torch.equal(before, lm.model.state_dict()[f"model.layers.{EDIT_LAYER['small']}.mlp.down_proj.weight"])


def test_edit_out_then_eval_matches_in_memory(small_fact_lm, tmp_path):
    out = tmp_path / "edited"
    reqs_file = bundled_path("counterfact-edit-1k.json")
    base = [sys.executable, "-m", "mobiedit.cli", "--quiet"]
    r = subprocess.run(base + ["edit", "--model", str(small_fact_lm), "--requests", str(reqs_file), "--limit", "3",
                               "--method", "rome", "--out", str(out), "--force"], capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    mem = {line.split()[0]: float(line.split()[1]) for line in r.stdout.splitlines()
           if line.split() and line.split()[0].endswith(("_acc", "_prob"))}
    js = tmp_path / "eval.json"
    r2 = subprocess.run(base + ["eval", "--model", str(out), "--requests", str(reqs_file), "--limit", "3",
                                "--json", str(js)], capture_output=True, text=True, timeout=600)
    assert r2.returncode == 0, r2.stderr
    saved = json.loads(js.read_text())["aggregate"]
    assert mem and all(abs(mem[k] - saved[k]) < 0.05 for k in mem), (mem, saved)
    assert (out / "journal" / "journal.jsonl").is_file()
    assert len((out / "journal" / "journal.jsonl").read_text().splitlines()) == 3
