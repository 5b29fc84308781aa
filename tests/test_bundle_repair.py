"""``edit --bundle --repair`` (issue 16: a bundle edited many times keeps answering every new
fact): the bundle's recheck of earlier edits (:func:`mobiedit.export.verify.lost_edits`) agrees
with the written-edit verdict; a lost edit is re-taught as a new journal entry (``repair_of``),
undone with the edit it repairs, at most ``MAX_REPAIRS`` times; a fact a later edit replaced is
not re-taught."""
from __future__ import annotations

import dataclasses
import shutil

import pytest

from mobiedit.editing.config import ContextConfig
from mobiedit.errors import ConfigError
from mobiedit.journal import Journal
from mobiedit.requests import EditRequest
from mobiedit.zo import ZOConfig
from mobiedit.export import ops
from mobiedit.export.bundle import export_bundle, load_bundle
from mobiedit.export.config import (EditSetup, EditShapes, ExportConfig, InferenceShapes, LowerConfig,
                                    QuantizeConfig)
from mobiedit.export.ops import MAX_REPAIRS, edit_bundle, superseded, undo_bundle_edit
from mobiedit.export.recipe import recipe_of
from mobiedit.export.verify import lost_edits, says_now

LLAMA = pytest.mark.parametrize("tiny_model_dir", ["llama"], indirect=True)

A = EditRequest(case_id="a", prompt="{} professionally plays the sport", subject="David Robinson",
                target_new="baseball", target_true="basketball")
A2 = EditRequest(case_id="a2", prompt="{} professionally plays the sport", subject="David Robinson",
                 target_new="hockey", target_true="basketball")
C = EditRequest(case_id="c", prompt="{} speaks", subject="Danielle Darrieux",
                target_new="English", target_true="French")


@pytest.fixture(scope="session")
def bundle_dir(tiny_model_dir, tmp_path_factory):
    cfg = ExportConfig(inference=InferenceShapes(max_seq_len=48, prefill_chunk=8, slots=8),
                       edit_shapes=EditShapes(K=5, rows=4, suffix=20, prefix=24, targets=24, kl=1),
                       quant=QuantizeConfig(scheme="fp32", calibration_batches=2),
                       lower=LowerConfig(runtime="onnxruntime"),
                       edit=EditSetup(layer=1, context=ContextConfig(lengths=((2, 2),)), stats_limit=100))
    return export_bundle(tiny_model_dir, tmp_path_factory.mktemp("repair") / "b", cfg)


def _copy(src, tmp_path):
    dst = tmp_path / "bundle"
    shutil.copytree(src, dst)
    return load_bundle(dst)


ZO = ZOConfig(estimator="fzoo", n_dirs=4, h=0.05, optimizer="adam", lr=0.5, max_steps=30, max_evals=1000,
              check_every=1, seed=0)


@LLAMA
def test_the_recheck_agrees_with_the_written_verdict(bundle_dir, tmp_path):
    b = _copy(bundle_dir, tmp_path)
    frac = recipe_of(b.manifest).success_fraction
    [res] = edit_bundle(b, [A], ZO, force=True)
    journal = b.journal()
    said = says_now(b, A, b.slots(journal), frac)
    assert said == res.succeeded == res.entry.metrics["succeeded"]
    assert [e.id for e in lost_edits(b, journal, frac)] == ([] if said else [res.entry.id])
    assert lost_edits(b, journal, frac, skip={res.entry.id}) == []


@LLAMA
def test_a_replaced_fact_is_not_repaired(bundle_dir, tmp_path):
    b = _copy(bundle_dir, tmp_path)
    [first] = edit_bundle(b, [A], ZO, force=True)
    results = edit_bundle(b, [A2], ZO, force=True, repair=True)
    assert len(results) == 1 and results[0].repair_of is None
    assert superseded(b.journal(), first.entry) and not superseded(b.journal(), results[0].entry)


@LLAMA
def test_a_lost_edit_is_repaired_and_undone_with_the_edit_it_repairs(bundle_dir, tmp_path, monkeypatch):
    b = _copy(bundle_dir, tmp_path)
    [first] = edit_bundle(b, [A], ZO, force=True)
    # the mechanism (detection is tested above): A is declared lost after every edit, and every
    # search is declared to hold (the random tiny model learns nothing in a few steps)
    monkeypatch.setattr(ops, "lost_edits", lambda bb, j, f, skip: [e for e in j.entries(active_only=True)
                                                                      if e.id == first.entry.id])
    climb = ops.climb_bundle_edit
    monkeypatch.setattr(ops, "climb_bundle_edit", lambda *a, **k: (lambda f, lad: (dataclasses.replace(
        f, succeeded=True), lad))(*climb(*a, **k)))
    second, repair = edit_bundle(b, [C], ZO, force=True, repair=True)
    assert second.repair_of is None and repair.repair_of == first.entry.id and repair.request == A
    assert repair.applied and repair.entry.config["repair_of"] == first.entry.id
    for _ in range(2):  # at most MAX_REPAIRS recorded repairs of one edit
        edit_bundle(b, [C], ZO, force=True, repair=True)
    assert len(ops.repairs_of(b.journal(), first.entry.id)) == MAX_REPAIRS
    undo_bundle_edit(b, first.entry.id)
    active = Journal.open(b.path / "journal").entries(active_only=True)
    assert all(e.request["case_id"] == "c" for e in active) and len(active) == 3


def test_repair_is_refused_without_a_bundle():
    from mobiedit.cli import build_parser
    from mobiedit.cli.edit import cmd_edit

    args = build_parser().parse_args(["edit", "--preset", "small", "--subject", "X", "--prompt", "{} is",
                                      "--target", "Y", "--out", "o", "--repair"])
    with pytest.raises(ConfigError) as err:
        cmd_edit(args)
    assert err.value.where == "--repair"


@LLAMA
@pytest.mark.parametrize("stop_on", ["loop", "written"])
def test_stop_on_written_keeps_searching_past_a_write_that_fails(bundle_dir, tmp_path, monkeypatch, stop_on):
    """Recipe ``success.stop_on``: with ``written`` the loop stops only where the written edit holds.
    The loop's own rule is made to pass everywhere (a tiny random model meets no real rule in a few
    steps) and the first written check to fail: the search goes on past it, every check is counted,
    and the loop's verdict is the written one. With ``loop`` the search stops at its first check and
    only the verify after write runs. The journal records which stop was used."""
    import mobiedit.driver as driver

    b = _copy(bundle_dir, tmp_path)
    real, calls = ops.written_holds, []

    def first_fails(*args):
        calls.append(1)
        return False if len(calls) == 1 else real(*args)

    monkeypatch.setattr(ops, "written_holds", first_fails)
    monkeypatch.setattr(driver, "edit_holds", lambda full, fraction: True)
    monkeypatch.setattr(driver, "within_margin", lambda *args: True)
    zo = dataclasses.replace(ZO, max_steps=12, max_evals=1000)
    [res] = edit_bundle(b, [C], zo, force=True, stop_on=stop_on, clamp_ladder=())
    e = res.entry
    assert e.config["stop_on"] == stop_on and e.metrics["written_refused"] == res.written_refused
    assert e.metrics["loop_succeeded"] == res.loop_succeeded
    if stop_on == "loop":
        assert res.loop_succeeded and res.status == "SUCCESS_CHECK" and not res.succeeded  # the write failed
        assert e.metrics["written_checks"] == 0 and res.written_refused == 0 and len(calls) == 1  # the verify only
        return
    # a delta checked twice (the loop's last step, then its final point) is written once
    assert 2 <= len(calls) <= e.metrics["written_checks"] and res.written_refused >= 1
    assert res.loop_succeeded == res.succeeded
    assert res.written_refused == e.metrics["written_checks"] - (1 if res.succeeded else 0)


@LLAMA
def test_a_subject_at_position_0_is_refused_before_any_search(bundle_dir, tmp_path, monkeypatch):
    """mobiedit.prompts.subject_context_error on the bundle path: a tokenizer without BOS (as
    SmolLM2's) puts a one-token subject that opens the prompt at position 0."""
    from mobiedit.errors import RequestError

    b = _copy(bundle_dir, tmp_path)
    tok = b.tokenizer()

    class NoBos:
        def __call__(self, text, add_special_tokens=True, **kw):
            ids = tok(text, add_special_tokens=add_special_tokens, **kw)["input_ids"]
            return {"input_ids": ids[1:] if add_special_tokens and ids[:1] == tok("")["input_ids"][:1] else ids}

    monkeypatch.setattr(b, "tokenizer", lambda: NoBos())
    first = EditRequest(case_id="first", prompt="{} is a language of", subject="English", target_new="Italy",
                        target_true="England")
    assert len(tok("English", add_special_tokens=False)["input_ids"]) == 1
    searched = []
    monkeypatch.setattr(ops, "_edit_one", lambda *a, **k: searched.append(a))
    with pytest.raises(RequestError, match="request 'first', field 'prompt'.*first token"):
        edit_bundle(b, [C, first], ZO, force=True)
    assert searched == [] and b.journal().entries() == []
