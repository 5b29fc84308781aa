"""Tests of mobiedit.journal: record / apply / undo bit-exactness, layouts, a property test
(the reads' validation: test_journal_reading.py)."""
from __future__ import annotations

import hashlib
import json

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file, save_file

import mobiedit.journal as journal_mod
from mobiedit.errors import JournalError, NumericalError
from mobiedit.families import Family, edit_weight
from mobiedit.journal import BASE_FILE, JOURNAL_FILE, Journal, apply_factors, factors_name
from journal_kit import (GPT2, LLAMA, REQ, do_edit, edited_journal, factors, same_state, snapshot,
                         tiny_gpt2, tiny_llama)


@pytest.fixture
def edited(tmp_path):
    return edited_journal(tmp_path / "j")


# ----------------------------------------------------------------------------- math / layout

def test_apply_factors_llama_layout_changes_output_by_rank_one():
    model = tiny_llama()
    lin = model.model.layers[0].mlp.down_proj
    gen = torch.Generator().manual_seed(1)
    u, w = factors(lin.weight, True, gen)
    k = torch.randn(3, 64, generator=gen)
    before = lin(k)
    with torch.no_grad():
        lin.weight.copy_(apply_factors(lin.weight, u, w, True))
    torch.testing.assert_close(lin(k) - before, (k @ w)[:, None] * u[None, :], rtol=1e-5, atol=1e-5)


def test_apply_factors_gpt2_conv1d_layout():
    model = tiny_gpt2()
    conv = model.transformer.h[1].mlp.c_proj
    assert tuple(conv.weight.shape) == (128, 32)  # [in, out]
    gen = torch.Generator().manual_seed(2)
    u, w = factors(conv.weight, False, gen)
    assert (u.numel(), w.numel()) == (32, 128)
    k = torch.randn(3, 128, generator=gen)
    before = conv(k)
    new = apply_factors(conv.weight, u, w, False)
    assert torch.equal(new, conv.weight.detach() + torch.outer(w, u))
    with torch.no_grad():
        conv.weight.copy_(new)
    torch.testing.assert_close(conv(k) - before, (k @ w)[:, None] * u[None, :], rtol=1e-5, atol=1e-5)
    with pytest.raises(JournalError, match="do not fit a \\[in, out\\] weight"):
        apply_factors(conv.weight, w, u, False)


def test_apply_factors_dtype_and_purity():
    gen = torch.Generator().manual_seed(3)
    weight = torch.randn(40, 30, generator=gen).to(torch.bfloat16)
    orig = weight.clone()
    u, w = torch.randn(40, generator=gen, dtype=torch.float64), torch.randn(30, generator=gen) * 1e-2
    out = apply_factors(weight, u, w, True)
    assert out.dtype == torch.bfloat16 and torch.equal(weight, orig)  # input untouched
    # contract: float32 arithmetic (factors cast to float32), one rounding back to the weight dtype
    assert torch.equal(out, (orig.float() + torch.outer(u.float(), w)).to(torch.bfloat16))
    assert not torch.equal(out, orig + torch.outer(u, w.double()).to(torch.bfloat16))


# ----------------------------------------------------------------------------- record

def test_record_writes_files_and_entries(edited):
    j, model, base, edits = edited
    folder = j.folder
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [JOURNAL_FILE, BASE_FILE] + [factors_name(i) for i in (1, 2, 3, 4)])
    lines = (folder / JOURNAL_FILE).read_text().splitlines()
    assert [json.loads(x)["id"] for x in lines] == [1, 2, 3, 4]
    for (entry, u, w), layer in zip(edits, (1, 0, 1, 1)):
        assert entry.status == "applied" and entry.method == "rome" and entry.family == "llama"
        assert entry.layer == layer and entry.module == f"model.layers.{layer}.mlp.down_proj"
        assert (entry.d_out, entry.d_in, entry.weight_out_in) == (32, 64, True)
        data = (folder / entry.factors).read_bytes()
        assert entry.sha256 == hashlib.sha256(data).hexdigest()
        stored = load_file(str(folder / entry.factors))
        assert torch.equal(stored["u"], u) and torch.equal(stored["w"], w) and stored["u"].dtype == torch.float32
        assert entry.request == REQ.to_dict() and entry.edit_request() == REQ
    stored_base = load_file(str(folder / BASE_FILE))
    assert set(stored_base) == {"model.layers.0.mlp.down_proj", "model.layers.1.mlp.down_proj"}
    for name, t in stored_base.items():  # the ORIGINAL weights, written once
        assert torch.equal(t, base[name + ".weight"])
    assert Journal.open(folder).entries() == j.entries()


def test_record_metrics_config_and_validation(tmp_path):
    model, gen = tiny_llama(), torch.Generator().manual_seed(0)
    j = Journal.open(tmp_path / "j")
    e, _, _ = do_edit(j, model, LLAMA, 0, gen, metrics={"efficacy": 1.0}, config={"seed": 7, "lr": 0.5})
    assert Journal.open(tmp_path / "j").entry(e.id).config == {"seed": 7, "lr": 0.5}
    weight = edit_weight(model, LLAMA, 1).detach().clone()
    u, w = factors(weight, True, gen)
    bad = [
        (dict(u=w), JournalError, "argument 'u'"),
        (dict(w=u), JournalError, "argument 'w'"),
        (dict(u=u * float("nan")), NumericalError, "argument 'u'"),
        (dict(base_weight=weight[0]), JournalError, "argument 'base_weight'"),
        (dict(family="bert"), JournalError, "argument 'family'"),
        (dict(layer=-1), JournalError, "argument 'layer'"),
        (dict(method=""), JournalError, "argument 'method'"),
        (dict(metrics={"x": object()}), JournalError, "argument 'metrics'"),
        (dict(metrics={"loss": float("nan")}), JournalError, "argument 'metrics'"),
        (dict(config=[1]), JournalError, "argument 'config'"),
        (dict(request=3), JournalError, "argument 'request'"),
        (dict(module_name="model.layers.0.mlp.down_proj", base_weight=torch.zeros(64, 32),
              u=torch.zeros(64), w=torch.zeros(32)), JournalError, "was edited as llama \\[32x64\\]"),
    ]
    args = dict(request=REQ, method="rome", family=LLAMA, layer=1, module_name="model.layers.1.mlp.down_proj",
                u=u, w=w, base_weight=weight)
    before = {p.name: p.read_bytes() for p in (tmp_path / "j").iterdir()}
    for change, err, where in bad:
        with pytest.raises(err, match=where):
            j.record(**{**args, **change})
    assert {p.name: p.read_bytes() for p in (tmp_path / "j").iterdir()} == before  # nothing written
    assert len(j.entries()) == 1
    entry = j.record(**{**args, "family": "llama", "request": {"free": "form"}})
    assert entry.id == 2 and entry.family == "llama" and entry.request == {"free": "form"}


def test_record_refuses_a_model_that_drifted_from_the_journal(tmp_path):
    """Issue 19 case 4: a weight that is not base + active edits (changed outside the journal, or
    the journal of another model) is refused, not warned about; nothing is written."""
    model, gen = tiny_llama(), torch.Generator().manual_seed(0)
    j = Journal.open(tmp_path / "j")
    do_edit(j, model, LLAMA, 0, gen)
    before = {p.name: p.read_bytes() for p in (tmp_path / "j").iterdir()}
    with torch.no_grad():
        edit_weight(model, LLAMA, 0).add_(1.0)  # change outside the journal
    with pytest.raises(JournalError, match="belongs to another model") as err:
        do_edit(j, model, LLAMA, 0, gen)
    assert "field 'base_sha256'" in str(err.value) and "journal.jsonl" in str(err.value)
    assert {p.name: p.read_bytes() for p in (tmp_path / "j").iterdir()} == before
    assert len(j.entries()) == 1


def test_crash_before_journal_write_leaves_old_journal(tmp_path, monkeypatch):
    model, gen = tiny_llama(), torch.Generator().manual_seed(0)
    j = Journal.open(tmp_path / "j")
    do_edit(j, model, LLAMA, 0, gen)
    text = (tmp_path / "j" / JOURNAL_FILE).read_text()

    def crash(*a, **k):
        raise OSError("disk full")
    monkeypatch.setattr(journal_mod, "atomic_write_text", crash)
    with pytest.raises(OSError):
        do_edit(j, model, LLAMA, 1, gen)
    monkeypatch.undo()
    assert (tmp_path / "j" / JOURNAL_FILE).read_text() == text and len(j.entries()) == 1
    reopened = Journal.open(tmp_path / "j")  # orphan factors file 2 is ignored ...
    assert [e.id for e in reopened.entries()] == [1]
    assert (tmp_path / "j" / factors_name(2)).exists()
    entry, _, _ = do_edit(reopened, tiny_llama(), LLAMA, 1, gen)  # ... and overwritten
    assert entry.id == 2 and Journal.open(tmp_path / "j").entries()[-1].id == 2


# ----------------------------------------------------------------------------- apply / undo

def test_apply_all_reproduces_edited_model_bit_exactly(edited):
    j, model, base, _ = edited
    fresh = tiny_llama()
    assert same_state(fresh, base)
    assert j.apply_all(fresh, LLAMA) == [1, 2, 3, 4]
    assert same_state(fresh, model.state_dict())
    with pytest.raises(JournalError, match="does not hold the journal's base weight"):
        j.apply_all(fresh, LLAMA)  # applying twice is refused ...
    assert same_state(fresh, model.state_dict())  # ... without changing anything


@pytest.mark.parametrize("undo_id", [1, 2, 3, 4])
def test_undo_equals_reapplying_the_others_from_base(edited, undo_id):
    j, model, base, edits = edited
    undone = j.undo(undo_id, model, LLAMA)
    assert undone.status == "undone" and undone.id == undo_id
    reference = tiny_llama()
    for entry, u, w in edits:  # re-apply the other edits from base, same ops, same order
        if entry.id != undo_id:
            weight = reference.get_submodule(entry.module).weight
            with torch.no_grad():
                weight.copy_(apply_factors(weight, u, w, True))
    assert same_state(model, reference.state_dict())
    assert [e.id for e in Journal.open(j.folder).entries(active_only=True)] == [i for i in (1, 2, 3, 4) if i != undo_id]
    fresh = tiny_llama()
    j.apply_all(fresh, LLAMA)
    assert same_state(fresh, reference.state_dict())


def test_undo_all_restores_base_and_errors(edited):
    j, model, base, _ = edited
    for i in (3, 1, 4, 2):
        j.undo(i, model, LLAMA)
    assert same_state(model, base)
    assert j.entries(active_only=True) == [] and len(j.entries()) == 4
    with pytest.raises(JournalError, match="edit 3 is already undone"):
        j.undo(3, model, LLAMA)
    with pytest.raises(JournalError, match="no edit 99"):
        j.undo(99, model, LLAMA)
    with pytest.raises(JournalError, match="field 'family'"):
        j.bake(tiny_gpt2(), GPT2)


def test_undo_on_baked_and_reloaded_model(edited, tmp_path):
    """`edit --out`: baked weights saved with the journal beside them; undo still works."""
    j, model, base, edits = edited
    assert j.bake(model, LLAMA) == ["model.layers.1.mlp.down_proj", "model.layers.0.mlp.down_proj"]
    out = tmp_path / "out"
    out.mkdir()
    save_file({k: v.clone() for k, v in model.state_dict().items()}, str(out / "model.safetensors"))
    j.copy_to(out / "journal")
    loaded = tiny_llama(seed=5)
    loaded.load_state_dict(load_file(str(out / "model.safetensors")))
    assert same_state(loaded, model.state_dict())
    j2 = Journal.open(out / "journal")
    assert j2.entries() == j.entries()
    with pytest.raises(JournalError, match="base weight"):
        j2.apply_all(loaded, LLAMA)
    j2.undo(2, loaded, LLAMA)
    j.undo(2, model, LLAMA)
    assert same_state(loaded, model.state_dict())
    assert not Journal.open(j.folder).entry(2).active and not Journal.open(j2.folder).entry(2).active


def test_bake_is_idempotent_from_any_state(edited):
    j, model, base, _ = edited
    target = snapshot(model)
    scrambled = tiny_llama()
    with torch.no_grad():
        scrambled.get_submodule("model.layers.1.mlp.down_proj").weight.mul_(3)
    scrambled.load_state_dict({k: v for k, v in base.items() if "down_proj" not in k}, strict=False)
    j.bake(scrambled, LLAMA)
    j.bake(scrambled, LLAMA)
    assert same_state(scrambled, target)


def test_gpt2_conv1d_journal(tmp_path):
    model, gen = tiny_gpt2(), torch.Generator().manual_seed(9)
    base = snapshot(model)
    j = Journal.open(tmp_path / "g")
    edits = [do_edit(j, model, GPT2, layer, gen) for layer in (0, 1, 0)]
    assert (edits[0][0].d_out, edits[0][0].d_in, edits[0][0].weight_out_in) == (32, 128, False)
    j.undo(1, model, GPT2)
    ref = tiny_gpt2()
    assert same_state(ref, base)
    for entry, u, w in edits[1:]:
        weight = ref.get_submodule(entry.module).weight
        expected = weight.detach() + torch.outer(w, u)  # Conv1D: W + w u^T
        new = apply_factors(weight, u, w, False)
        assert torch.equal(new, expected)
        with torch.no_grad():
            weight.copy_(new)
    assert same_state(model, ref.state_dict())
    with pytest.raises(JournalError, match="field 'family'"):
        j.apply_all(tiny_llama(), LLAMA)


def test_bf16_model_undo_bit_exact(tmp_path):
    model, gen = tiny_llama().to(torch.bfloat16), torch.Generator().manual_seed(4)
    base = snapshot(model)
    j = Journal.open(tmp_path / "b")
    edits = [do_edit(j, model, LLAMA, 0, gen) for _ in range(3)]
    assert load_file(str(tmp_path / "b" / BASE_FILE))["model.layers.0.mlp.down_proj"].dtype == torch.bfloat16
    j.undo(2, model, LLAMA)
    weight = base["model.layers.0.mlp.down_proj.weight"]
    for entry, u, w in (edits[0], edits[2]):
        weight = apply_factors(weight, u, w, True)
    assert torch.equal(model.model.layers[0].mlp.down_proj.weight, weight)


# ----------------------------------------------------------------------------- property test

TOY = Family(name="toy", layers="blocks", layer="blocks.{}", mlp_out="blocks.{}", attn="", embed="",
             final_norm="", lm_head="", rotary=None, weight_out_in=True)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 1), st.integers(0, 2**31 - 1)), min_size=1, max_size=8),
       st.sampled_from([torch.float32, torch.bfloat16, torch.float16]))
def test_random_record_undo_sequences(tmp_path_factory, ops, dtype):
    """After any sequence of records and undos, every module == base + active edits in id order."""
    model = torch.nn.Module()
    with torch.random.fork_rng():
        torch.manual_seed(0)
        model.blocks = torch.nn.ModuleList([torch.nn.Linear(5, 3, bias=False) for _ in range(2)])
    model.to(dtype)
    base = snapshot(model)
    j = Journal.open(tmp_path_factory.mktemp("prop"))
    factors_by_id: dict[int, tuple[str, torch.Tensor, torch.Tensor]] = {}
    for is_undo, layer, seed in ops:
        active = [e.id for e in j.entries(active_only=True)]
        if is_undo and active:
            j.undo(active[seed % len(active)], model, TOY)
            continue
        weight = model.blocks[layer].weight
        gen = torch.Generator().manual_seed(seed)
        u, w = torch.randn(3, generator=gen), torch.randn(5, generator=gen)
        e = j.record({"seed": seed}, "toy", TOY, layer, f"blocks.{layer}", u, w, weight.detach().clone())
        with torch.no_grad():
            weight.copy_(apply_factors(weight, u, w, True))
        factors_by_id[e.id] = (e.module, u, w)
    expected = {k: v.clone() for k, v in base.items()}
    for e in j.entries(active_only=True):
        module, u, w = factors_by_id[e.id]
        expected[module + ".weight"] = apply_factors(expected[module + ".weight"], u, w, True)
    assert same_state(model, expected)
    reopened = Journal.open(j.folder)
    fresh = torch.nn.Module()
    fresh.blocks = torch.nn.ModuleList([torch.nn.Linear(5, 3, bias=False) for _ in range(2)]).to(dtype)
    fresh.load_state_dict(base)
    reopened.apply_all(fresh, TOY)
    assert same_state(fresh, expected)
