"""Issue 19 cases 5, 6 and 9: config sizes are checked against the weights' header before a module
is built (mobiedit.weights_check); prompts longer than the model's positions are refused before any
forward pass (mobiedit.prompts.check_request_lengths); a FIFO or a device as a weights file, and a
shape-mismatched checkpoint, get messages that name the file and say what is wrong."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from mobiedit.errors import ModelLoadError, RequestError
from mobiedit.models import load_model


def _copy(src, dst, **cfg):
    shutil.copytree(src, dst)
    if cfg:
        c = json.loads((dst / "config.json").read_text())
        c.update(cfg)
        (dst / "config.json").write_text(json.dumps(c))
    return dst


@pytest.fixture
def no_module_built(monkeypatch):
    """Fail the test if transformers is asked to build a model (the check must come first)."""
    from transformers import AutoModelForCausalLM

    def refuse(*a, **k):
        raise AssertionError("a module was built from the config")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", refuse)


@pytest.mark.parametrize("cfg,field", [
    ({"num_hidden_layers": 10_000_000}, "num_hidden_layers"),
    ({"num_hidden_layers": 4}, "num_hidden_layers"),
    ({"hidden_size": 4096}, "hidden_size"),
    ({"intermediate_size": 1 << 18}, "intermediate_size"),
    ({"vocab_size": 1 << 22}, "vocab_size"),
    ({"num_key_value_heads": 4}, "num_key_value_heads"),
    ({"max_position_embeddings": 1 << 40}, "max_position_embeddings"),
    ({"hidden_size": "64"}, "hidden_size"),
])
def test_config_sizes_are_checked_against_the_weights_before_building(tmp_path, tiny_llama_dir, no_module_built,
                                                                     cfg, field):
    folder = _copy(tiny_llama_dir, tmp_path / "m", **cfg)
    with pytest.raises(ModelLoadError) as err:
        load_model(folder)
    assert f"config.json, field '{field}'" in str(err.value) and str(folder) in str(err.value)


def test_gpt2_config_sizes_are_checked(tmp_path_factory, no_module_built):
    from tests.conftest import _save_tiny

    src = tmp_path_factory.mktemp("gpt2")
    _save_tiny("gpt2", src)
    for cfg, field in (({"n_layer": 9}, "n_layer"), ({"n_positions": 4096}, "n_positions"),
                       ({"n_inner": 512}, "n_inner")):
        folder = _copy(src, tmp_path_factory.mktemp("g") / "m", **cfg)
        with pytest.raises(ModelLoadError, match=f"field '{field}'"):
            load_model(folder)


def test_a_huge_layer_count_fails_fast_in_a_fresh_process(tmp_path, tiny_llama_dir):
    """The CLI path: one named line, exit 2 (it used to run > 300 s and take > 5 GB)."""
    folder = _copy(tiny_llama_dir, tmp_path / "m", num_hidden_layers=10_000_000)
    r = subprocess.run([sys.executable, "-m", "mobiedit.cli", "eval", "--model", str(folder), "--subject", "A",
                        "--prompt", "{} is", "--target", "b"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "num_hidden_layers" in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_fifo_and_device_as_weights_are_not_regular_files(tmp_path, tiny_llama_dir):
    fifo = _copy(tiny_llama_dir, tmp_path / "fifo")
    (fifo / "model.safetensors").unlink()
    os.mkfifo(fifo / "model.safetensors")
    dev = _copy(tiny_llama_dir, tmp_path / "dev")
    (dev / "model.safetensors").unlink()
    (dev / "model.safetensors").symlink_to("/dev/zero")
    cfg_fifo = _copy(tiny_llama_dir, tmp_path / "cfg")
    (cfg_fifo / "config.json").unlink()
    os.mkfifo(cfg_fifo / "config.json")
    code = ("import sys\nfrom mobiedit.models import load_model\n"
            "try:\n    load_model(sys.argv[1])\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    for folder, kind in ((fifo, "a FIFO"), (dev, "a device, through a symbolic link"), (cfg_fifo, "a FIFO")):
        # a subprocess with a timeout: reading a FIFO would block this test forever
        r = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=120)
        assert r.stdout.startswith("ModelLoadError") and f"not a regular file ({kind})" in r.stdout, r.stdout + r.stderr
        assert str(folder) in r.stdout and "no file named" not in r.stdout


def test_shape_mismatch_message_names_the_field_not_an_unprinted_report(tmp_path, tiny_llama_dir, monkeypatch):
    folder = _copy(tiny_llama_dir, tmp_path / "m", intermediate_size=96)
    with pytest.raises(ModelLoadError) as err:
        load_model(folder)
    assert "intermediate_size = 96" in str(err.value) and "report" not in str(err.value)
    # a mismatch only transformers finds: its text ("look at the above report") is not passed on
    from transformers import AutoModelForCausalLM

    def hf_mismatch(*a, **k):
        raise RuntimeError("You set `ignore_mismatched_sizes` to `False`, thus raising an error. For details look at "
                           "the above report!")

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", hf_mismatch)
    with pytest.raises(ModelLoadError) as err:
        load_model(tiny_llama_dir)
    assert "tensor shapes differ" in str(err.value) and "report" not in str(err.value)
    assert str(tiny_llama_dir) in str(err.value)


# ----------------------------------------------------------------------------- prompt length (case 6)

def test_prompts_longer_than_the_positions_are_refused_before_any_forward(tiny_model_dir, tmp_path, monkeypatch):
    from mobiedit.prompts import check_request_lengths, position_limit
    from mobiedit.requests import requests_from_cli
    from mobiedit.session import check_fits

    lm = load_model(tiny_model_dir)
    limit = position_limit(lm.model.config)
    if limit > 256:  # the tiny llama / qwen2 have 2048 / 32768 positions: give them 256, as the Llama
        lm.model.config.max_position_embeddings = limit = 256
    long = requests_from_cli("Paris", "{} is " + "very " * 300 + "the capital of", "Italy")
    with pytest.raises(RequestError) as err:
        check_fits(lm, long)
    assert f"the model has {limit}" in str(err.value) and "field 'prompt'" in str(err.value)
    assert "positions" in str(err.value) and "shorten" in str(err.value)

    def no_forward(*a, **k):
        raise AssertionError("a forward pass ran")

    monkeypatch.setattr(lm.model, "forward", no_forward)
    huge = requests_from_cli("x" * 1_000_000, "{} is the capital of", "Italy")
    with pytest.raises(RequestError, match="characters long"):
        check_request_lengths(lm.tokenizer, huge, limit)
    ok = requests_from_cli("Paris", "{} is the capital of", "Italy")
    check_request_lengths(lm.tokenizer, ok, limit, reserve=10)
    with pytest.raises(RequestError, match="context template"):
        check_request_lengths(lm.tokenizer, ok, limit, reserve=limit)


def test_cli_edit_refuses_a_too_long_prompt_with_a_named_error(tmp_path_factory):
    from tests.conftest import _save_tiny

    gpt2 = tmp_path_factory.mktemp("gpt2")  # 256 positions: the GPT-2 raised IndexError
    _save_tiny("gpt2", gpt2)
    out = tmp_path_factory.mktemp("o") / "out"
    # the 1 MB subject comes in a request file (one argv string is limited to 128 KiB by Linux)
    big = tmp_path_factory.mktemp("r") / "big.json"
    big.write_text(json.dumps([{"case_id": 0, "requested_rewrite": {
        "prompt": "{} is the capital of", "subject": "x" * 1_000_000, "target_new": {"str": "Italy"},
        "target_true": {"str": "France"}}}]))
    for how in (["--subject", ("Paris " * 400).strip(), "--prompt", "{} is the capital of", "--target", "Italy"],
                ["--requests", str(big)]):
        r = subprocess.run([sys.executable, "-m", "mobiedit.cli", "--quiet", "edit", "--model", str(gpt2), *how,
                            "--method", "rome", "--layer", "0", "--out", str(out)],
                           capture_output=True, text=True, timeout=300)
        assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-2000:]
        assert "the model has 256 positions" in r.stderr and "field 'prompt'" in r.stderr
        assert not out.exists()


def test_eval_and_trace_refuse_a_too_long_prompt_before_any_forward(tmp_path_factory, capsys, monkeypatch):
    """The same check on the other commands that run the model on requests (edit: above; bench:
    mobiedit.bench.run_row calls check_fits before its key statistics)."""
    from mobiedit import cli
    from tests.conftest import _save_tiny

    gpt2 = tmp_path_factory.mktemp("gpt2")
    _save_tiny("gpt2", gpt2)
    req = tmp_path_factory.mktemp("r") / "long.json"
    req.write_text(json.dumps([{"case_id": 0, "requested_rewrite": {
        "prompt": "{} is the capital of", "subject": "Paris " * 400, "target_new": {"str": "Italy"},
        "target_true": {"str": "France"}}}]))
    import torch

    def no_forward(*a, **k):
        raise AssertionError("a forward pass ran")

    monkeypatch.setattr(torch.nn.Module, "__call__", no_forward)
    out = tmp_path_factory.mktemp("t") / "trace"
    for argv in (["eval", "--model", str(gpt2), "--requests", str(req)],
                 ["trace", "--model", str(gpt2), "--requests", str(req), "--n", "1", "--out", str(out)]):
        assert cli.main(["--quiet", *argv]) == 2
        err = capsys.readouterr().err
        assert "field 'prompt'" in err and "the model has 256 positions" in err, err
    assert not out.exists()
