"""Causal trace (mobiedit.causal_trace, `mobiedit trace`): exactness, causality, shapes, determinism, CLI."""
from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest
import torch

from mobiedit.causal_trace import (POSITIONS, STATES, default_window, embedding_std, window_layers, prepare_prompt, sample_noise,
                                   subject_token_range, trace_prompt, trace_requests)
from mobiedit.causal_trace_report import format_table
from mobiedit.errors import ConfigError
from mobiedit.families import get_module, hidden_size, n_layers
from mobiedit.models import load_model
from mobiedit.requests import bundled_path, load_requests, requests_from_cli

SUBJECT = "Danielle Darrieux"
REQ = requests_from_cli(SUBJECT, "The mother tongue of {} is", "English", "French")[0]


def _sharp_model(path, scale: float = 30.0):
    """The tiny random model with its final norm scaled, so that the output distribution is peaked
    and corrupting the subject moves P(target) far more than the tolerances below."""
    from mobiedit.models import load_model

    lm = load_model(path)
    with torch.no_grad():
        for p in get_module(lm.model, lm.family.final_norm).parameters():
            p.mul_(scale)
    return lm


def _prompt_and_noise(lm, seed: int = 0, noise: float = 3.0):
    """The prompt with the model's own top prediction as target, and one noise sample."""
    prompt = prepare_prompt(lm.tokenizer, REQ)
    with torch.inference_mode():
        top = int(lm.model(input_ids=torch.tensor([prompt.input_ids])).logits[0, -1].argmax())
    prompt = dataclasses.replace(prompt, target_id=top)
    eps = sample_noise(len(prompt.subject), hidden_size(lm.model, lm.family),
                       noise * embedding_std(lm.model, lm.family, [prompt]), torch.Generator().manual_seed(seed))
    return prompt, eps


def test_subject_range_covers_exactly_the_subject(tiny_llama_dir):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    prompt = prepare_prompt(tok, REQ)
    span = subject_token_range(tok, REQ.rewrite_prompt, SUBJECT)
    assert span == prompt.subject and span.start > 1  # "The mother tongue of" comes first
    assert tok.decode(list(prompt.input_ids[span.start: span.stop])).strip() == SUBJECT
    assert prompt.position("last") == len(prompt.input_ids) - 1 and prompt.position("subject_last") == span[-1]


def test_restoring_last_residual_recovers_clean_probability(tiny_model_dir):
    lm = _sharp_model(tiny_model_dir)
    prompt, eps = _prompt_and_noise(lm)
    last = len(prompt.input_ids) - 1
    tr = trace_prompt(lm.model, lm.family, prompt, eps, {"subject_last": prompt.subject[-1], "last": last})
    total = tr.p_clean - tr.p_corrupt
    assert abs(total) > 1e-2, "precondition: the corruption must change P(target) for this test to mean anything"
    ie = tr.indirect_effect[STATES.index("resid"), 1, -1].item()
    assert ie == pytest.approx(total, abs=1e-5)
    # the last position's final residual is all the logits read: the subject's last token there does nothing
    assert tr.indirect_effect[STATES.index("resid"), 0, -1].item() == pytest.approx(0.0, abs=1e-6)


def test_restoring_before_the_subject_has_no_effect(tiny_model_dir):
    lm = _sharp_model(tiny_model_dir)
    prompt, eps = _prompt_and_noise(lm)
    before = prompt.subject.start - 1  # the token "of", which causal attention shields from the noise
    tr = trace_prompt(lm.model, lm.family, prompt, eps, {"before": before, "subject_last": prompt.subject[-1]})
    assert abs(tr.p_clean - tr.p_corrupt) > 1e-2
    assert tr.indirect_effect[:, 0].abs().max().item() < 1e-6
    # while restoring the corrupted subject's residual does move P
    assert tr.indirect_effect[STATES.index("resid"), 1].abs().max().item() > 1e-3


def test_window_is_romes_and_restores_every_layer_of_it(tiny_model_dir):
    assert list(window_layers(17, 10, 48)) == list(range(12, 22))  # ROME: max(0, l - w//2) .. l - (-w//2)
    assert list(window_layers(0, 10, 30)) == list(range(0, 5)) and list(window_layers(29, 10, 30)) == list(range(24, 30))
    assert list(window_layers(3, 1, 4)) == [3]
    assert default_window(48) == 10 and default_window(30) == 10 and default_window(18) == 6 and default_window(4) == 1
    lm = _sharp_model(tiny_model_dir)
    prompt, eps = _prompt_and_noise(lm)
    L = n_layers(lm.model, lm.family)
    pos = {"subject_last": prompt.subject[-1]}
    one = trace_prompt(lm.model, lm.family, prompt, eps, pos)
    wide = trace_prompt(lm.model, lm.family, prompt, eps, pos, window=4 * L)
    m, r = STATES.index("mlp"), STATES.index("resid")
    # a window covering the whole model restores the same set of MLP outputs at every reported layer
    assert torch.allclose(wide.p_restored[m, 0], wide.p_restored[m, 0, :1].expand(L), atol=1e-6)
    # and differs from single-layer restoration; the residual rows never use the window
    assert not torch.allclose(wide.p_restored[m, 0], one.p_restored[m, 0], atol=1e-6)
    assert torch.equal(wide.p_restored[r], one.p_restored[r])


def test_shapes_and_report(tiny_llama_dir):
    from mobiedit.models import load_model

    lm = load_model(tiny_llama_dir)
    reqs = load_requests(bundled_path("counterfact-edit-1k.json"))[:3]
    reqs.append(dataclasses.replace(reqs[0], case_id="no-truth", target_true=None))
    res = trace_requests(lm.model, lm.tokenizer, lm.family, reqs, generator=torch.Generator().manual_seed(0))
    L = n_layers(lm.model, lm.family)
    assert res.effects.shape == (len(STATES), len(POSITIONS), L) and res.n_layers == L
    assert res.n == 3 and res.skipped == 1
    assert 0.0 <= res.p_corrupt <= 1.0 and 0.0 < res.p_clean <= 1.0
    # averaged the same way: the last-layer residual at the last position is the total effect
    assert res.effects[STATES.index("resid"), POSITIONS.index("last"), -1].item() == pytest.approx(
        res.total_effect, abs=1e-5)
    d = json.loads(json.dumps(res.to_dict()))
    assert set(d["indirect_effect"]) == {f"{s}@{p}" for s in STATES for p in POSITIONS}
    assert all(len(v) == L for v in d["indirect_effect"].values())
    lines = format_table(res).splitlines()
    assert len(lines) == 2 + len(STATES) * len(POSITIONS)
    assert len({len(line) for line in lines[1:]}) == 1  # header and rows aligned to the same width
    with pytest.raises(ConfigError):
        trace_requests(lm.model, lm.tokenizer, lm.family, reqs, generator=torch.Generator(), noise=0.0)


def test_same_seed_same_trace(tiny_llama_dir):
    from mobiedit.models import load_model

    lm = load_model(tiny_llama_dir)
    reqs = load_requests(bundled_path("counterfact-edit-1k.json"))[:2]

    def run(seed):
        return trace_requests(lm.model, lm.tokenizer, lm.family, reqs, generator=torch.Generator().manual_seed(seed))

    a, b, c = run(0), run(0), run(1)
    assert torch.equal(a.effects, b.effects) and a.p_corrupt == b.p_corrupt
    assert a.p_clean == c.p_clean and a.p_corrupt != c.p_corrupt


def test_cli_writes_json_and_png(tmp_path, tiny_llama_dir, capsys):
    from mobiedit.cli import main

    out = tmp_path / "trace"
    rc = main(["--quiet", "trace", "--model", str(tiny_llama_dir), "--n", "2", "--seed", "3", "--out", str(out)])
    assert rc == 0
    stdout = capsys.readouterr().out
    assert all(f"{s}@{p}" in stdout for s in STATES for p in POSITIONS)
    data = json.loads((out / "trace.json").read_text())
    assert data["n"] == 2 and data["seed"] == 3 and data["layers"] == 3 and data["family"] == "llama"
    assert (out / "trace.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert sorted(p.name for p in out.iterdir()) == ["trace.json", "trace.png"]  # no temporaries left


@pytest.mark.parametrize("args, needle", [(["--n", "0"], "--n"), (["--noise", "-1"], "--noise")])
def test_cli_rejects_bad_values_on_one_line(tmp_path, tiny_llama_dir, args, needle):
    out = tmp_path / "trace"
    r = subprocess.run([sys.executable, "-m", "mobiedit.cli", "--quiet", "trace", "--model", str(tiny_llama_dir),
                        *args, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mobiedit: error: ") and needle in lines[0] and "fix:" in lines[0]
    assert not out.exists()


def test_cli_missing_model_folder(tmp_path, capsys):
    from mobiedit.cli import main

    rc = main(["--quiet", "trace", "--model", str(tmp_path / "nope"), "--n", "1", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "model folder does not exist" in err[0]


def test_noise_unit_is_measured_on_the_embedding_output_at_subject_tokens(tiny_llama_dir):
    """σ is the std of what the noise is added to: an embedding module that scales its output
    (Gemma multiplies by √hidden inside the module) gets a σ scaled alike, so the corruption is
    the same share of the signal; the raw weight matrix's std would leave it 25x too weak on Gemma."""
    lm = load_model(tiny_llama_dir)
    prompt = prepare_prompt(lm.tokenizer, REQ)
    embed = lm.model.get_input_embeddings()
    sub = torch.tensor([prompt.input_ids[i] for i in prompt.subject])
    sigma = embedding_std(lm.model, lm.family, [prompt])
    assert sigma == pytest.approx(float(embed.weight[sub].std()), rel=1e-6)
    handle = embed.register_forward_hook(lambda mod, inp, out: out * 25.0)
    try:
        assert embedding_std(lm.model, lm.family, [prompt]) == pytest.approx(25.0 * sigma, rel=1e-5)
    finally:
        handle.remove()
