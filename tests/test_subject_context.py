"""An edit whose subject is its prompt's first token (no BOS: position 0, the attention sink) is
refused before any search, with a named error; a harness records it unapplied, nothing written."""
from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch


class _NoBos:
    """A whitespace tokenizer that adds no BOS (as SmolLM2's)."""

    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [len(w) for w in text.split()]}


class _Bos(_NoBos):
    def __call__(self, text, add_special_tokens=True):
        return {"input_ids": [1] + super().__call__(text)["input_ids"]}


def test_the_rule_names_the_field_and_the_fix():
    from mobiedit.errors import RequestError
    from mobiedit.prompts import request_refusal, subject_context_error
    from mobiedit.requests import EditRequest

    err = subject_context_error(_NoBos(), "Israel's capital city is", "Israel's", "request 'r1', field 'prompt'")
    assert isinstance(err, RequestError)
    assert "request 'r1', field 'prompt'" in str(err) and "first token" in str(err) and "reword the prompt" in str(err)
    req = EditRequest(case_id="r2", prompt="{} capital city is", subject="Israel's", target_new="Damascus",
                      target_true="Jerusalem")
    assert "request 'r2', field 'prompt'" in str(request_refusal(_NoBos(), req))
    # words before the subject; a subject whose last token is past position 0; a tokenizer with BOS
    assert subject_context_error(_NoBos(), "The capital city of Israel is", "Israel", "w") is None
    assert subject_context_error(_NoBos(), "Danielle Darrieux speaks", "Danielle Darrieux", "w") is None
    assert subject_context_error(_Bos(), "Israel's capital city is", "Israel's", "w") is None


@pytest.fixture()
def no_bos(tiny_llama_dir, tmp_path):
    """The tiny Llama with its tokenizer's BOS template removed, its profile, and a prepared context."""
    from tokenizers import processors

    from mobiedit.editing.config import ContextConfig
    from mobiedit.methods.rome import ROMEConfig
    from mobiedit.models import load_model
    from mobiedit.session import prepare

    folder = tmp_path / "m"
    shutil.copytree(tiny_llama_dir, folder)
    (folder / "mobiedit.json").write_text('{"edit_layer": 0, "stats_corpus": "counterfact"}')
    lm = load_model(folder)
    lm.tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")
    assert lm.tokenizer("English is")["input_ids"] == lm.tokenizer("English is", add_special_tokens=False)["input_ids"]
    assert len(lm.tokenizer("English", add_special_tokens=False)["input_ids"]) == 1
    base = ROMEConfig()
    cfg = dataclasses.replace(base, layer=0, steps=3, context=ContextConfig(lengths=((4, 2),)))
    return lm, cfg, prepare(lm, cfg, seed=0)


def _requests():
    from mobiedit.requests import EditRequest

    # "English" is one token of the tiny tokenizer: without BOS it ends at position 0
    first = EditRequest(case_id="first", prompt="{} is a language of", subject="English", target_new="Italy",
                        target_true="England")
    inside = EditRequest(case_id="inside", prompt="The capital of {} is", subject="France", target_new="Rome",
                         target_true="Paris")
    return first, inside


def test_an_edit_session_refuses_it_before_the_search_and_the_bench_scores_the_unedited_model(no_bos):
    from mobiedit.methods.common import REFUSED
    from mobiedit.session import EditSession, edit_independent

    lm, cfg, ctx = no_bos
    first, inside = _requests()
    w0 = lm.model.model.layers[0].mlp.down_proj.weight.detach().clone()
    out = EditSession.open(lm, cfg, ctx).edit(first)
    assert out.status == REFUSED and not out.succeeded and out.loss_evals == 0 and out.backward_calls == 0
    assert "first token" in out.config["refused"]
    recs = edit_independent(lm, [first, inside], cfg, ctx, progress=False)
    assert [r.applied for r in recs] == [False, True]
    assert recs[0].outcome.status == REFUSED and recs[1].outcome.status != REFUSED
    assert recs[1].outcome.loss_evals > 0
    assert recs[0].scores is not None  # scored, on the unedited model
    assert torch.equal(lm.model.model.layers[0].mlp.down_proj.weight, w0)


def test_edit_refuses_up_front_and_force_never_writes_it(no_bos, tmp_path):
    from mobiedit.errors import RequestError
    from mobiedit.session import check_fits, edit_sequential

    lm, cfg, ctx = no_bos
    first, inside = _requests()
    w0 = lm.model.model.layers[0].mlp.down_proj.weight.detach().clone()
    with pytest.raises(RequestError, match="field 'prompt'"):
        check_fits(lm, [inside, first], ctx)
    check_fits(lm, [inside, first], ctx, subjects=False)  # a harness records it instead
    with pytest.raises(RequestError, match="first token"):
        edit_sequential(lm, [inside, first], cfg, ctx, None, force=True, progress=False)
    assert torch.equal(lm.model.model.layers[0].mlp.down_proj.weight, w0)  # refused before the first search
    from mobiedit.sequential_run import RowState, edit_step
    from mobiedit.session import EditSession

    st = RowState()  # the sequential harness: recorded, not applied, even with force
    edit_step(EditSession.open(lm, cfg, ctx), first, 1, True, st)
    assert st.records[0]["applied"] is False and st.records[0]["status"] == "REFUSED"
    assert first.case_id not in st.applied_ids
    assert torch.equal(lm.model.model.layers[0].mlp.down_proj.weight, w0)
