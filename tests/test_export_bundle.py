"""Lowered fp32 programs and bundles on the tiny Llama: parity (eager vs .pte vs .onnx), greedy decoding
from the bundle alone, rank-one slots fed by the journal (edit without re-export, undo), the
bundle edit loop, and refusal of tampered / newer bundles. Every program is lowered once per
session (module fixture below). The shipped quantized programs: test_export_quantized.py."""
from __future__ import annotations

import json
import math
import os
import shutil
import stat

import pytest
import torch

from mobiedit.errors import BundleError, ConfigError
from mobiedit.families import get_module
from mobiedit.journal import Journal, apply_factors
from mobiedit.models import load_model
from mobiedit.outputs import MARKER
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.termsafe import term_safe
from mobiedit.zo import ZOConfig

from mobiedit.export.bundle import export_bundle, load_bundle
from mobiedit.export.config import InferenceShapes
from mobiedit.export.generate import CacheShape, greedy_tokens
from mobiedit.export.graphs import EditModule, PrefixModule, StepModule
from mobiedit.export.ops import bundle_tokens, edit_bundle, run_bundle, undo_bundle_edit
from mobiedit.export.runtime import EagerProgram
from export_kit import PROMPT, REQUEST, bundle_edit_feed, export_cfg

pytestmark = pytest.mark.parametrize("tiny_model_dir", ["llama"], indirect=True)


@pytest.fixture(scope="session")
def bundles(tiny_model_dir, tmp_path_factory):
    """fp32 ExecuTorch and ONNX bundles, exported once."""
    root = tmp_path_factory.mktemp("bundles")
    return {name: export_bundle(tiny_model_dir, root / name, export_cfg(runtime, "fp32"))
            for name, runtime in (("et", "executorch"), ("onnx", "onnxruntime"))}


def _copy(path, tmp_path):
    dst = tmp_path / "bundle"
    shutil.copytree(path, dst)
    return dst


def test_manifest_lists_every_file(tiny_model_dir, bundles):
    for name, path in bundles.items():
        b = load_bundle(path)
        m = b.manifest
        assert m["format_version"] == 1 and m["model_family"] == "llama"
        assert m["edit_module"] == "model.layers.1.mlp.down_proj"
        # the output marker (which command wrote the folder, for the --out gate) is not content
        on_disk = {p.name for p in path.iterdir() if p.is_file()} - {"manifest.json", MARKER}
        assert (path / MARKER).is_file()
        assert set(m["files"]) == on_disk
        umask = os.umask(0o022)
        os.umask(umask)
        modes = {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in path.iterdir() if p.is_file()}
        assert set(modes.values()) == {oct(0o666 & ~umask)}, modes  # keystats too (safetensors writes 0600)
        assert {"prefill", "decode", "edit", "prefix"} == set(m["programs"])
        assert (path / "journal" / "journal.jsonl").is_file() and "journal" not in m["files"]
        assert len(m["edit"]["templates"]) == 3
        assert m["chat"] is None  # the tiny tokenizer has no chat template (tests/test_export_chat.py)
        # where the export's time went, stage by stage (the bar `mobiedit export` shows)
        st = m["checks"]["stage_seconds"]
        assert set(st) == {"prepare", "quantize", "capture", "lower", "check", "save"}  # (sorted keys)
        assert all(v >= 0 for v in st.values()) and st["lower"] > 0
        assert sum(st.values()) <= m["checks"]["export_seconds"] + 0.1 * len(st)
        ks = b.keystats()
        assert ks["c_inv"].shape == (128, 128) and torch.equal(ks["c_inv"], ks["c_inv"].T)
        assert ks["base_weight"].shape == (64, 128)
    assert load_bundle(bundles["et"]).manifest["programs"]["edit"] == {
        **load_bundle(bundles["et"]).manifest["programs"]["edit"], "file": "model.pte", "method": "edit"}


def test_fp32_programs_match_eager(tiny_model_dir, bundles):
    """Edit and prefix programs: eager vs .pte vs .onnx within 1e-4."""
    lm = load_model(tiny_model_dir)
    et, ox = load_bundle(bundles["et"]), load_bundle(bundles["onnx"])
    feed, packed, shapes, state = bundle_edit_feed(lm, et)
    edit = EditModule(lm.model, lm.family, 1, shapes)
    scale = float(state.v_init.norm()) / math.sqrt(state.v_init.shape[0])
    g = torch.Generator().manual_seed(0)
    deltas = torch.randn(shapes.K, state.v_init.shape[0], generator=g) * scale * torch.linspace(0, 1, shapes.K).view(-1, 1)
    f = {**feed, "deltas": deltas}
    ref = EagerProgram(edit, *edit.io()).run(f)
    for b in (et, ox):
        got = b.program("edit").run(f)
        assert (got["losses"] - ref["losses"]).abs().max() < 1e-4, (b.runtime, got["losses"], ref["losses"])
        assert torch.equal(got["correct"], ref["correct"])
    prefix = PrefixModule(lm.model, lm.family, 1, shapes, 4)
    pf = {**packed.prefix_feed, "slot_u": torch.randn(4, 64, generator=g) * 0.1,
          "slot_w": torch.randn(4, 128, generator=g) * 0.1}
    pref = EagerProgram(prefix, *prefix.io()).run(pf)
    for b in (et, ox):
        got = b.program("prefix").run(pf)
        for k, v in pref.items():
            assert (got[k] - v).abs().max() < 1e-4, (b.runtime, k)


def test_bundle_greedy_equals_eager_greedy(tiny_model_dir, bundles):
    lm = load_model(tiny_model_dir)
    shapes = InferenceShapes(max_seq_len=48, prefill_chunk=8, slots=4)
    pre, dec = (StepModule(lm.model, lm.family, 1, c, shapes) for c in (8, 1))
    d = pre.dims
    ids = lm.tokenizer(PROMPT)["input_ids"]
    eager = greedy_tokens(EagerProgram(pre, *pre.io()), EagerProgram(dec, *dec.io()), ids, 16,
                          CacheShape(d.num_layers, d.num_kv_heads, 48, d.head_dim, 8),
                          torch.zeros(4, d.d_out), torch.zeros(4, d.d_in), eos_id=lm.tokenizer.eos_token_id)
    hf = lm.model.generate(torch.tensor([ids]), max_new_tokens=16, do_sample=False)[0, len(ids):].tolist()
    assert eager == hf[:len(eager)]
    for name in ("et", "onnx"):
        assert bundle_tokens(bundles[name], PROMPT, 16) == eager, name
    assert run_bundle(bundles["et"], PROMPT, 16) == lm.tokenizer.decode(eager, skip_special_tokens=True)


def _forcing_factors(lm, token: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rank-one factors making ``token`` the next greedy token after PROMPT: w reads the edit
    layer's key at the last prompt token, u pushes the residual toward ``token``'s unembedding."""
    from mobiedit.hooks import record

    mod = get_module(lm.model, lm.family.mlp_out, 1)
    with torch.no_grad(), record(mod) as rec:
        lm.model(input_ids=torch.tensor([lm.tokenizer(PROMPT)["input_ids"]]))
    k = rec.input[0, -1]
    w = k / k.dot(k)
    u = lm.model.lm_head.weight[token].detach() * 200.0
    return u, w, mod.weight.detach().clone()


def test_journal_edit_changes_answer_without_reexport_and_undo_restores(tiny_model_dir, bundles, tmp_path):
    lm = load_model(tiny_model_dir)
    path = _copy(bundles["et"], tmp_path)
    before = bundle_tokens(path, PROMPT, 6)
    forced = 7 if before[0] != 7 else 9
    u, w, base = _forcing_factors(lm, forced)
    entry = Journal.open(path / "journal").record(REQUEST, "test", "llama", 1, "model.layers.1.mlp.down_proj",
                                                  u, w, base)
    after = bundle_tokens(path, PROMPT, 6)
    assert after[0] == forced and after != before
    assert run_bundle(path, PROMPT, 6) != run_bundle(bundles["et"], PROMPT, 6)
    # the slot arithmetic equals the journal's weight arithmetic on the HF model
    with torch.no_grad():
        get_module(lm.model, lm.family.mlp_out, 1).weight.copy_(apply_factors(base, u, w, True))
    ids = lm.tokenizer(PROMPT)["input_ids"]
    assert lm.model.generate(torch.tensor([ids]), max_new_tokens=6, do_sample=False)[0, len(ids):].tolist() == after
    load_bundle(path)  # the journal is outside the checksummed files: the bundle still verifies
    undo_bundle_edit(path, entry.id)
    assert bundle_tokens(path, PROMPT, 6) == before


def test_edit_bundle_loop_matches_the_eager_method(tiny_model_dir, bundles, tmp_path):
    """Bundle edit loop (prefix + edit programs, native ZO) == mobiedit_edit on the HF model."""
    from mobiedit.forward.quant import QuantConfig
    from mobiedit.methods.common import ModelContext
    from mobiedit.methods.mobiedit import MobiEditConfig, mobiedit_edit

    path = _copy(bundles["et"], tmp_path)
    b = load_bundle(path)
    zo = ZOConfig(estimator="fzoo", n_dirs=b.manifest["shapes"]["edit_K"] - 1, h=0.05, optimizer="adam", lr=0.5,
                  max_steps=4, max_evals=1000, check_every=1, seed=3)
    [res] = edit_bundle(b, [REQUEST], zo, force=True)
    lm = load_model(tiny_model_dir)
    ref = mobiedit_edit(lm, REQUEST, MobiEditConfig(layer=1, zo=zo, quant=QuantConfig("none")),
                        ModelContext(templates=b.manifest["edit"]["templates"]))
    assert res.applied and res.status == ref.status and res.loss_evals == ref.loss_evals
    assert len(res.losses) == len(ref.losses) >= 3
    for a, r in zip(res.losses, ref.losses):
        assert abs(a - r) <= 1e-3 * max(1.0, abs(r)), (res.losses, ref.losses)
    journal = Journal.open(path / "journal")
    [entry] = journal.entries(active_only=True)
    assert entry.method == "mobiedit-bundle" and entry.request["case_id"] == "t1"
    u, w = journal.load_factors(entry)
    assert torch.isfinite(u).all() and u.shape == (64,) and w.shape == (128,)
    undo_bundle_edit(path, entry.id)
    assert Journal.open(path / "journal").entries(active_only=True) == []


def test_the_manifest_recipe_is_what_bundle_edits_use(bundles, tmp_path, capsys):
    """Export writes the shipped recipe (n_dirs = edit_K − 1); edit_bundle and `edit --bundle`
    search and judge with the manifest's recipe, --seed replacing only its seed."""
    from mobiedit.cli import build_parser
    from mobiedit.export.recipe import shipped_recipe

    path = _copy(bundles["et"], tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    K = manifest["shapes"]["edit_K"]
    assert manifest["recipe"] == shipped_recipe(K).as_manifest() and manifest["recipe"]["zo"]["n_dirs"] == K - 1
    manifest["recipe"]["zo"].update(lr=0.3, max_steps=2, seed=5)
    manifest["recipe"]["success"]["fraction"] = 0.5
    manifest["recipe"]["ladder"] = {"fractions": [0.3, 1.0], "from_edits": 2}  # not the default ladder
    (path / "manifest.json").write_text(json.dumps(manifest))  # not a checksummed file
    [res] = edit_bundle(path, [REQUEST], force=True)
    assert res.applied and len(res.losses) <= 2
    args = build_parser().parse_args(["edit", "--bundle", str(path), "--subject", REQUEST.subject, "--prompt",
                                      REQUEST.prompt, "--target", REQUEST.target_new, "--seed", "7", "--force"])
    args.fn(args)
    first, second = Journal.open(path / "journal").entries()
    for entry, seed in ((first, 5), (second, 7)):
        zo = entry.config["zo"]
        assert (zo["lr"], zo["max_steps"], zo["seed"], zo["n_dirs"]) == (0.3, 2, seed, K - 1), zo
        assert (entry.config["success_fraction"], entry.config["success_nll"]) == (0.5, 0.5)
    # the first edit of a bundle uses the manifest's clamp; the second (one already there) climbs
    # the recipe's clamp ladder, and the journal and the command's line say which clamp was written
    from mobiedit.ladder import sequential_ladder

    clamp = manifest["edit"]["objective"].get("clamp_norm_factor", ObjectiveConfig().clamp_norm_factor)
    assert "clamp_norm_factor" not in first.config
    rungs = sequential_ladder(clamp, (0.3, 1.0))
    assert second.config["clamp_norm_factor"] == rungs[second.config["ladder_tries"] - 1]
    assert f"clamp={second.config['clamp_norm_factor']:g} (rung {second.config['ladder_tries']})" in capsys.readouterr().out


def test_a_bundle_edits_with_the_whole_gradient_recipe(bundles, tmp_path):
    """A manifest carrying recipes.FZOO_GRADIENT (`export --recipe fzoo-grad`): the bundle's search
    runs coordinate directions sized by the whole gradient, and the journal records it."""
    from mobiedit.export.recipe import shipped_recipe

    path = _copy(bundles["et"], tmp_path)
    manifest = json.loads((path / "manifest.json").read_text())
    K = manifest["shapes"]["edit_K"]
    manifest["recipe"] = shipped_recipe(K, "fzoo-grad").as_manifest()
    manifest["recipe"]["zo"].update(max_steps=3)
    (path / "manifest.json").write_text(json.dumps(manifest))  # not a checksummed file
    [res] = edit_bundle(path, [REQUEST], force=True)
    assert 1 <= len(res.losses) <= 3 and res.loss_evals >= len(res.losses) * K  # + the written-edit checks
    [entry] = Journal.open(path / "journal").entries()
    zo = entry.config["zo"]
    assert (zo["directions"], zo["normalise"], zo["optimizer"], zo["n_dirs"]) == ("coordinates", "gradient", "sgd", K - 1)


def test_a_bundle_edit_searches_with_the_recipes_settle_phase(bundles, tmp_path, monkeypatch):
    """A manifest carrying ``settle`` (a profile's, export/recipe.with_settle): the bundle's search gets
    it (the driver's phase, tested in test_driver) and the journal records it; off, nothing is
    recorded. (The tiny random model's search does not succeed, so the phase itself does not run here.)"""
    from mobiedit.export import ops
    from mobiedit.recipes import Settle

    seen = []
    real = ops.search_value

    def spy(graph, v_init, objective, recipe, *args, **kwargs):
        seen.append(recipe.settle)
        return real(graph, v_init, objective, recipe, *args, **kwargs)

    monkeypatch.setattr(ops, "search_value", spy)
    entries = {}
    for rounds in (0, 2):
        path = _copy(bundles["et"], tmp_path / f"r{rounds}")
        manifest = json.loads((path / "manifest.json").read_text())
        assert manifest["recipe"]["settle"] == {"rounds": 0, "shrink": 0.8, "steps": 20}  # the exporter's: off
        manifest["recipe"]["settle"] = {"rounds": rounds, "shrink": 0.5, "steps": 5}
        manifest["recipe"]["zo"]["max_steps"] = 2
        (path / "manifest.json").write_text(json.dumps(manifest))  # not a checksummed file
        edit_bundle(path, [REQUEST], force=True)
        [entries[rounds]] = Journal.open(path / "journal").entries()
    assert seen == [Settle(0, 0.5, 5), Settle(2, 0.5, 5)]
    assert "settle" not in entries[0].config
    assert entries[2].config["settle"] == {"rounds": 2, "shrink": 0.5, "steps": 5}


def test_a_bundle_checks_on_the_steps_own_row(bundles, tmp_path):
    """The exported recipe checks at the step's row 0 (``check_at`` "base"): the same delta and verdict
    as the check after the update, and no edit-program call of the check's own."""
    import dataclasses

    from mobiedit.export.ops import search_bundle_edit
    from mobiedit.export.recipe import recipe_of

    b = load_bundle(_copy(bundles["et"], tmp_path))
    recipe = recipe_of(b.manifest)
    assert recipe.zo.check_at == "base" and recipe.zo.estimator == "fzoo"
    program, calls = b.program("edit"), [0]
    run = program.run
    program.run = lambda feed: (calls.__setitem__(0, calls[0] + 1), run(feed))[1]
    out = {}
    for mode in ("update", "base"):
        before = calls[0]
        zo = dataclasses.replace(recipe.zo, check_at=mode, max_steps=6)
        out[mode] = (search_bundle_edit(b, b.journal(readonly=True), b.keystats(), REQUEST, zo=zo), calls[0] - before)
    (upd, upd_calls), (base, base_calls) = out["update"], out["base"]
    assert torch.equal(upd.delta, base.delta) and upd.succeeded == base.succeeded and upd.status == base.status
    assert len(upd.losses) >= 2 and upd_calls - base_calls >= len(upd.losses) - 1, (upd_calls, base_calls)


def test_a_bundle_edit_climbs_a_given_ladder_warm(bundles, tmp_path):
    """edit_bundle's clamp_ladder with warm rungs: a rung too small to say anything fails, the next
    starts from its delta (journal: the clamp written, two rungs, warm); every rung's evaluations are counted."""
    from mobiedit.export.ops import search_bundle_edit

    path = _copy(bundles["et"], tmp_path)
    b = load_bundle(path)
    zo = ZOConfig(estimator="fzoo", n_dirs=b.manifest["shapes"]["edit_K"] - 1, h=0.05, optimizer="adam", lr=0.5,
                  max_steps=4, max_evals=1000, check_every=1, seed=3)
    tiny = 1e-3
    first = search_bundle_edit(b, b.journal(), b.keystats(), REQUEST, zo, clamp=tiny)
    assert not first.succeeded and first.delta is not None and float(first.delta.norm()) > 0
    warm = search_bundle_edit(b, b.journal(), b.keystats(), REQUEST, zo, clamp=4.0, start=first.delta)
    cold = search_bundle_edit(b, b.journal(), b.keystats(), REQUEST, zo, clamp=4.0)
    assert warm.losses != cold.losses  # the start is used
    [res] = edit_bundle(b, [REQUEST], zo, force=True, clamp_ladder=(tiny, 4.0), warm_ladder=True)
    [entry] = Journal.open(path / "journal").entries()
    assert (entry.config["clamp_norm_factor"], entry.config["ladder_tries"], entry.config["ladder_warm"]) == (4.0, 2, True)
    assert res.loss_evals == first.loss_evals + warm.loss_evals and res.losses == first.losses + warm.losses


def test_tampered_and_newer_bundles_are_refused(bundles, tmp_path):
    path = _copy(bundles["onnx"], tmp_path)
    tok = path / "tokenizer.json"
    tok.write_bytes(tok.read_bytes().replace(b'"', b"'", 1))
    with pytest.raises(BundleError, match="files.tokenizer.json.*sha256"):
        load_bundle(path)
    shutil.copy2(bundles["onnx"] / "tokenizer.json", tok)
    load_bundle(path)
    manifest = json.loads((path / "manifest.json").read_text())
    for patch, pattern in (({"format_version": 2}, "format_version.*newer.*upgrade"),
                           ({"runtime": "tflite"}, "runtime"),
                           ({"slots": 0}, "slots"),
                           ({"files": {k: v for k, v in manifest["files"].items() if k != "edit.onnx"}}, "programs")):
        (path / "manifest.json").write_text(json.dumps({**manifest, **patch}))
        with pytest.raises(BundleError, match=pattern):
            load_bundle(path)
    # an edit program of the earlier interface (bool mask, "kl_index") is refused before anything runs
    old = json.loads(json.dumps(manifest))
    old["programs"]["edit"]["inputs"] = ["kl_index" if n == "kl_suffix_index" else n
                                         for n in old["programs"]["edit"]["inputs"]]
    (path / "manifest.json").write_text(json.dumps(old))
    with pytest.raises(BundleError, match=r"programs\.edit\.inputs.*re-export"):
        edit_bundle(path, [REQUEST])
    assert Journal.open(path / "journal").entries() == []
    (path / "manifest.json").write_text(json.dumps(manifest))
    (path / "edit.onnx").unlink()
    with pytest.raises(BundleError, match="missing"):
        load_bundle(path)


def test_cli_run_and_undo(bundles, tmp_path, capsys):
    import argparse

    from mobiedit.export.cli import register

    parser = argparse.ArgumentParser()
    register(parser.add_subparsers(dest="cmd"))
    args = parser.parse_args(["run", str(bundles["onnx"]), "--prompt", PROMPT, "--max-new-tokens", "5"])
    assert args.fn(args) == 0
    # generated text reaches the terminal escaped (control and bidi characters as \\xNN)
    assert capsys.readouterr().out.strip("\n") == term_safe(run_bundle(bundles["onnx"], PROMPT, 5), keep_newlines=True)
    args = parser.parse_args(["export", "--model", "m", "--out", "o", "--runtime", "onnxruntime"])
    assert args.quant is None and args.fn.__name__ == "cmd_export"
    args = parser.parse_args(["run", str(bundles["onnx"]), "--prompt", PROMPT, "--chat"])
    with pytest.raises(ConfigError, match="no chat template"):
        args.fn(args)


def test_measure_bundle_against_its_source_model(tiny_model_dir, bundles):
    """``mobiedit bench-export --bundle``: sizes from the manifest and the source folder, both
    decode speeds measured in the same call (positive; no timing is asserted)."""
    from mobiedit.export.bench import measure_bundle

    f = measure_bundle(bundles["et"], tiny_model_dir, PROMPT, decode_tokens=4)
    m = load_bundle(bundles["et"]).manifest
    assert f["fp32_safetensors_bytes"] == sum(p.stat().st_size for p in tiny_model_dir.glob("*.safetensors"))
    assert f["bundle_bytes"] == sum(e["bytes"] for e in m["files"].values())
    assert f["bundle_programs_bytes"] == m["files"]["model.pte"]["bytes"]
    assert f["size_ratio"] == round(f["bundle_bytes"] / f["fp32_safetensors_bytes"], 3)
    assert min(f[k] for k in ("decode_tokens_per_s_bundle", "decode_tokens_per_s_eager_fp32",
                              "generate_tokens_per_s_bundle", "generate_tokens_per_s_eager_fp32")) > 0
    json.dumps(f)


def test_run_on_an_executorch_bundle_prints_no_cpuinfo_lines_and_writes_nothing(bundles, tmp_path):
    """Issue 19 case 11: `mobiedit run` printed ExecuTorch's "[cpuinfo_utils.cpp:..] Failed to open
    midr file" lines on every call, and created a missing journal/ (a reader must not write)."""
    import subprocess
    import sys

    b = tmp_path / "b"
    shutil.copytree(bundles["et"], b)
    shutil.rmtree(b / "journal")
    r = subprocess.run([sys.executable, "-m", "mobiedit.cli", "--quiet", "run", str(b), "--prompt", PROMPT,
                        "--max-new-tokens", "2"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip(), r.stderr[-2000:]
    assert "cpuinfo" not in r.stdout + r.stderr and "midr" not in r.stdout + r.stderr, r.stderr[-2000:]
    assert not (b / "journal").exists()
