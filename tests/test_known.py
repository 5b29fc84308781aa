"""`mobiedit requests known`: keep the records whose true answer the model produces greedily."""
from __future__ import annotations

import json

import pytest

from mobiedit.cli import main
from mobiedit.errors import ConfigError
from mobiedit.evaluate import greedy_exact
from mobiedit.factlm import PRESETS
from mobiedit.known import known_flags, scan_known, write_known
from mobiedit.models import load_model
from mobiedit.requests import bundled_path, load_requests

CF = str(bundled_path("counterfact-edit-1k.json"))


def test_flags_equal_greedy_decoding(small_fact_lm):
    """One teacher-forced forward gives exactly the greedy-decoding verdicts (the slow reference)."""
    lm = load_model(small_fact_lm)
    reqs = load_requests(CF)[:40]
    prompts, answers = [r.rewrite_prompt for r in reqs], [r.target_true for r in reqs]
    whole, first = greedy_exact(lm.model, lm.tokenizer, prompts, answers)
    flags = known_flags(lm.model, lm.tokenizer, prompts, answers, batch_size=7)
    assert [f.whole for f in flags] == whole and [f.first_token for f in flags] == first
    assert sum(whole) > 0  # the comparison covers known records, not only misses


def test_fact_lm_knows_most_of_its_facts(small_fact_lm, tmp_path):
    """The small preset is trained on the first ``n_facts`` (30) records only: it knows nearly all
    of those and almost none of the records after them."""
    n = PRESETS["small"].n_facts
    lm = load_model(small_fact_lm)
    scan = scan_known(lm.model, lm.tokenizer, [CF], rule="whole", limit=2 * n)
    c = scan.counts[0]
    assert (c.read, c.scored) == (2 * n, 2 * n)
    assert c.first_token >= c.whole and len(scan.records) == c.whole
    trained = {r.case_id for r in load_requests(CF)[:n]}
    kept = [r["origin"]["case_id"] for r in scan.records]
    assert sum(k in trained for k in kept) >= 0.9 * n  # the facts it was taught
    assert sum(k not in trained for k in kept) <= 0.1 * n  # not the ones it never saw
    assert all(r["known"]["whole"] for r in scan.records)
    loose = scan_known(lm.model, lm.tokenizer, [CF], rule="first-token", limit=2 * n)
    assert len(loose.records) == c.first_token
    out = tmp_path / "known.json"
    write_known(out, scan)
    back = load_requests(out)
    orig = {r.case_id: r for r in load_requests(CF)[:2 * n]}
    assert len(back) == c.whole
    for b in back:  # the flat record reloads to the same request
        o = orig[b.case_id.split("/", 1)[1]]
        assert (b.rewrite_prompt, b.target_new, b.target_true) == (o.rewrite_prompt, o.target_new, o.target_true)
        assert b.neighborhood_prompts == o.neighborhood_prompts and b.paraphrase_prompts == o.paraphrase_prompts
    assert "records/s" in scan.summary()


def test_random_model_knows_almost_nothing(tiny_llama_dir, tmp_path):
    lm = load_model(tiny_llama_dir)
    scan = scan_known(lm.model, lm.tokenizer, [CF], rule="whole", limit=100)
    assert scan.counts[0].whole <= 2
    if not scan.records:
        with pytest.raises(ConfigError, match="knows none"):
            write_known(tmp_path / "k.json", scan)
        assert not (tmp_path / "k.json").exists()


def test_cli_requests_known(small_fact_lm, tmp_path, capsys):
    out = tmp_path / "known.json"
    zsre = str(bundled_path("zsre_mend_train-1k.json"))
    rc = main(["--quiet", "requests", "known", "--model", str(small_fact_lm), "--from", CF, zsre,
               "--limit", "30", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "counterfact-edit-1k" in text and "zsre_mend_train-1k" in text and "wrote" in text
    recs = json.loads(out.read_text())
    assert recs and all(r["case_id"].startswith(("counterfact-edit-1k/", "zsre_mend_train-1k/")) for r in recs)
    assert len(load_requests(out)) == len(recs)


def test_cli_requests_known_bad_input(small_fact_lm, tmp_path, capsys):
    rc = main(["requests", "known", "--model", str(small_fact_lm), "--from", CF, "--limit", "-1",
               "--out", str(tmp_path / "x.json")])
    assert rc == 2 and "--limit" in capsys.readouterr().err
    rc = main(["requests", "known", "--model", str(small_fact_lm), "--from", CF, CF,
               "--out", str(tmp_path / "x.json")])
    assert rc == 2 and "share a name" in capsys.readouterr().err
    assert not (tmp_path / "x.json").exists()


def test_a_record_an_edit_would_refuse_is_left_out(tiny_llama_dir, tmp_path, monkeypatch):
    """Known or not, a record whose subject is its prompt's first token under a tokenizer without
    BOS is not kept (an edit refuses it: mobiedit.prompts.subject_context_error) and is counted."""
    from tokenizers import processors

    from mobiedit import known
    from mobiedit.known import KnownFlags

    lm = load_model(tiny_llama_dir)
    lm.tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B")
    recs = [{"case_id": "first", "prompt": "English is a language of", "subject": "English", "target_new": "Italy",
             "ground_truth": "England"},
            {"case_id": "inside", "prompt": "The language English is spoken in", "subject": "English",
             "target_new": "Italy", "ground_truth": "England"}]
    f = tmp_path / "r.json"
    f.write_text(json.dumps(recs))
    monkeypatch.setattr(known, "known_flags", lambda m, t, prompts, answers, **k: [KnownFlags(True, True)] * len(prompts))
    scan = scan_known(lm.model, lm.tokenizer, [str(f)], rule="whole")
    assert [r["origin"]["case_id"] for r in scan.records] == ["inside"]
    assert scan.counts[0].refused == 1 and scan.counts[0].whole == 2
    assert "1 more left out" in scan.summary()
