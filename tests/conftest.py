"""Shared fixtures: tiny random HF checkpoints of each family written with save_pretrained."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch.set_num_threads(1)

# xdist schedules whole groups of tests on one worker (the Makefile runs ``-n 2``): each test file
# is one group, so its session fixtures are built on one worker, except that tests taking an
# expensive fixture below go to that fixture's group — the small fact LM is then trained once per
# run instead of once per worker, and the two slow export fixtures (``bundles`` of
# test_export_bundle.py, ``et_quant`` of test_export_quantized.py) are built on different workers.
# (pytest-xdist's own ``--dist loadgroup`` does not group under pytest 9.)
SHARED_FIXTURE_GROUPS = ("small_fact_lm", "et_quant")


def fixture_groups(tests_dir) -> dict[tuple[str, str], str]:
    """(file, test function) -> group, for the test functions that take a shared fixture — as an
    argument, or through a fixture of their own file that takes it (read from the source with
    ``ast``: the controller does not collect)."""
    import ast
    from pathlib import Path

    out = {}
    for f in sorted(Path(tests_dir).glob("test_*.py")):
        funcs = [n for n in ast.parse(f.read_text()).body if isinstance(n, ast.FunctionDef)]
        args = {n.name: {a.arg for a in n.args.args} for n in funcs}
        for group in SHARED_FIXTURE_GROUPS:
            needs = {group}
            while True:  # the file's fixtures that (transitively) take the shared one
                more = {name for name, a in args.items() if not name.startswith("test") and a & needs} - needs
                if not more:
                    break
                needs |= more
            for name, a in args.items():
                if name.startswith("test") and a & needs:
                    out.setdefault((f"tests/{f.name}", name), group)
    return out


def pytest_xdist_make_scheduler(config, log):
    from xdist.scheduler import LoadScopeScheduling

    groups = fixture_groups(Path(__file__).parent)

    class FixtureGroupScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            file, _, rest = nodeid.partition("::")
            return groups.get((file, rest.split("[")[0].split("::")[-1]), file)

    return FixtureGroupScheduling(config, log)


def _tokenizer(tmp):
    from mobiedit.factlm.train import train_tokenizer
    from mobiedit.requests import bundled_path
    import json

    recs = json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:200]
    text = [r["prompt"] + " " + r["ground_truth"] for r in recs] + [r["target_new"] for r in recs]
    return train_tokenizer(text, 512)


def _save_tiny(kind: str, path) -> None:
    from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM, Qwen2Config, Qwen2ForCausalLM

    tok = _tokenizer(path)
    torch.manual_seed(0)  # noqa: model init draws from the global generator in HF; test-only
    common = dict(vocab_size=len(tok), bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                  pad_token_id=tok.pad_token_id)
    if kind == "llama":
        m = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=2, **common))
    elif kind == "qwen2":
        m = Qwen2ForCausalLM(Qwen2Config(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=2, **common))
    else:
        m = GPT2LMHeadModel(GPT2Config(n_embd=64, n_layer=3, n_head=4, n_positions=256, **common))
    m.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)


def _save_tiny_gemma(path) -> None:
    """A tiny random Gemma-3 text model (sliding and full layers with their own RoPE bases:
    the family's quirks at test size)."""
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    tok = _tokenizer(path)
    torch.manual_seed(0)  # noqa: HF init draws from the global generator; test-only
    cfg = Gemma3TextConfig(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                           num_attention_heads=4, num_key_value_heads=2, head_dim=16, sliding_window=512,
                           layer_types=["sliding_attention", "full_attention", "sliding_attention", "full_attention"],
                           rope_parameters={"full_attention": {"rope_type": "default", "rope_theta": 1e6},
                                            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4}},
                           bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    Gemma3ForCausalLM(cfg).save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)


@pytest.fixture(scope="session", params=["llama", "qwen2", "gpt2"])
def tiny_model_dir(request, tmp_path_factory):
    path = tmp_path_factory.mktemp(f"tiny_{request.param}")
    _save_tiny(request.param, path)
    return path


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory):
    """A private cache for the whole test session (fact LM, key statistics).

    ``MOBIEDIT_TEST_CACHE`` (developers only) reuses a cache folder across runs; CI leaves it
    unset, so every CI run trains the small fact LM afresh."""
    from pathlib import Path

    reuse = os.environ.get("MOBIEDIT_TEST_CACHE")
    path = Path(reuse) if reuse else tmp_path_factory.mktemp("mobiedit_cache")
    old = os.environ.get("MOBIEDIT_CACHE")
    os.environ["MOBIEDIT_CACHE"] = str(path)
    yield path
    if old is None:
        os.environ.pop("MOBIEDIT_CACHE", None)
    else:
        os.environ["MOBIEDIT_CACHE"] = old


@pytest.fixture(scope="session")
def small_fact_lm(cache_dir):
    """The 'small' fact LM preset, trained once per test session (about a minute)."""
    from mobiedit.factlm import ensure_fact_lm

    return ensure_fact_lm("small", progress=False)


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny_llama_only")
    _save_tiny("llama", path)
    return path


@pytest.fixture
def model_copy(tiny_llama_dir, tmp_path):
    """A writable copy of the tiny llama folder (for tests that write its profile)."""
    import shutil

    d = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, d)
    return d


@pytest.fixture(scope="session")
def kill_bundle_base(tiny_llama_dir, tmp_path_factory):
    """A small ONNX Runtime fp32 bundle of the tiny llama (the kill harness's shapes, 8 slots),
    exported once per session (about 15 s); tests copy it before changing anything."""
    from mobiedit.export.bundle import export_bundle
    from tools.reliability.kill_bundle import bundle_config

    return export_bundle(tiny_llama_dir, tmp_path_factory.mktemp("kill_bundle") / "base", bundle_config("onnxruntime"))

