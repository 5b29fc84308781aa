"""Tests of mobiedit.requests: the three loaders on real bundled data, auto-detection, EditRequest,
writer, CLI (invalid records and files: test_request_validation.py)."""
from __future__ import annotations

import dataclasses
import json
import logging
import os

import pytest

from mobiedit.errors import RequestError
from mobiedit.request_record import spaced_target
from mobiedit.requests import (EditRequest, bundled_names, bundled_path, detect_format, load_requests,
                               requests_from_cli, save_requests, to_rome_record)
from requests_kit import ROME5, listing

FLAT = "counterfact-edit-1k.json"
ZSRE = "zsre_mend_train-1k.json"


def raw(name: str) -> list[dict]:
    return json.loads(bundled_path(name).read_text())


# ----------------------------------------------------------------------------- bundled data

def test_bundled_names_and_path():
    assert {FLAT, ZSRE, "counterfact-train.json"} <= set(bundled_names())
    p = bundled_path(FLAT)
    assert p.is_file() and p.name == FLAT
    with pytest.raises(RequestError, match="no bundled request file 'nope.json'.*counterfact-edit-1k.json"):
        bundled_path("nope.json")
    with pytest.raises(RequestError):
        bundled_path("../requests.py")


def test_flat_all_1000_load_and_map_fields():
    records = raw(FLAT)
    reqs = load_requests(bundled_path(FLAT))
    assert len(reqs) == len(records) == 1000
    assert len({r.case_id for r in reqs}) == 1000
    for rec, req in zip(records, reqs):
        assert req.source == "counterfact_flat"
        assert req.rewrite_prompt == rec["prompt"]
        assert req.prompt.count("{}") == 1
        assert req.case_id == str(rec["case_id"])
        assert req.target_new == rec["target_new"].strip()
        assert req.target_true == rec["ground_truth"].strip()
        assert req.paraphrase_prompts == (rec["rephrase_prompt"],)
        assert req.neighborhood_prompts == (rec["locality_prompt"],)
        assert req.neighborhood_answers == (rec["locality_ground_truth"],)
    first = reqs[0]
    assert (first.prompt, first.subject) == ("{} professionally plays the sport", "David Robinson")


def test_flat_train_10k_loads():
    reqs = load_requests(bundled_path("counterfact-train.json"), fmt="counterfact_flat")
    assert len(reqs) == 10000
    assert all(r.rewrite_prompt.count(r.subject) >= 1 for r in reqs)


def test_zsre_strict_names_first_invalid_record():
    with pytest.raises(RequestError) as ei:
        load_requests(bundled_path(ZSRE))
    msg = str(ei.value)
    assert "record 534" in msg and "field 'alt'" in msg and "fix:" in msg


def test_zsre_skip_invalid_reports_count(caplog):
    records = raw(ZSRE)
    with caplog.at_level(logging.WARNING, logger="mobiedit.requests"):
        reqs = load_requests(bundled_path(ZSRE), skip_invalid=True)
    assert len(reqs) == 998  # records 534 and 723 have an empty 'alt'
    assert {r.case_id for r in reqs}.isdisjoint({"534", "723"})
    assert "skipped 2 invalid of 1000 zsre records" in caplog.text
    assert "17 requests have target_new equal to target_true" in caplog.text
    by_id = {r.case_id: r for r in reqs}
    for i in (0, 174, 999):
        rec, req = records[i], by_id[str(i)]
        assert req.source == "zsre"
        assert req.rewrite_prompt == rec["src"]
        assert req.target_new == rec["alt"].strip()
        assert req.target_true == rec["answers"][0]
        assert req.paraphrase_prompts == (rec["rephrase"],)
        assert req.neighborhood_prompts == (rec["loc"],)
        assert req.neighborhood_answers == (rec["loc_ans"],)
    assert by_id["174"].target_new == "Captain Universe"  # stored " Captain Universe": space stripped
    assert all(not r.target_new.startswith(" ") for r in reqs)


def test_zsre_subjects_all_found_verbatim():
    """Decision record: in the bundled file every subject occurs verbatim in 'src'."""
    records = raw(ZSRE)
    assert sum(r["subject"] not in r["src"] for r in records) == 0


def test_rome_fixture_loads_and_ignores_extra_keys():
    reqs = load_requests(ROME5)
    flat = load_requests(raw(FLAT)[:5])
    assert len(reqs) == 5
    for r, f in zip(reqs, flat):
        assert r.source == "counterfact_rome"
        assert (r.case_id, r.prompt, r.subject, r.target_new, r.target_true) == \
               (f.case_id, f.prompt, f.subject, f.target_new, f.target_true)
        assert len(r.paraphrase_prompts) == 2 and r.paraphrase_prompts[0] == f.paraphrase_prompts[0]
        assert r.neighborhood_answers == (r.target_true,) * len(r.neighborhood_prompts)
    assert load_requests(ROME5, fmt="counterfact_rome") == reqs


def test_rome_plain_string_targets_and_optional_lists():
    recs = [{"case_id": 1, "requested_rewrite": {"prompt": "{} plays", "subject": "X",
                                                 "target_new": " golf ", "target_true": None}}]
    (r,) = load_requests(recs)
    assert (r.target_new, r.target_true, r.paraphrase_prompts, r.neighborhood_prompts) == ("golf", None, (), ())


# ----------------------------------------------------------------------------- auto-detect, inputs

def test_detect_format():
    assert detect_format({"requested_rewrite": {}}) == "counterfact_rome"
    assert detect_format({"src": "a", "alt": "b"}) == "zsre"
    assert detect_format({"prompt": "a", "target_new": "b"}) == "counterfact_flat"
    assert detect_format({"x": 1}) is None and detect_format([1]) is None


def test_explicit_wrong_format_names_missing_field():
    with pytest.raises(RequestError, match=r"record 0 \(case_id 3087\), field 'requested_rewrite': missing"):
        load_requests(bundled_path(FLAT), fmt="counterfact_rome")
    with pytest.raises(RequestError, match="field 'src': missing"):
        load_requests(bundled_path(FLAT), fmt="zsre")


def test_json_lines(tmp_path):
    recs = raw(FLAT)[:7]
    p = tmp_path / "r.jsonl"
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n\n")
    assert load_requests(p) == load_requests(recs)
    one = tmp_path / "one.jsonl"
    one.write_text(json.dumps(recs[0]) + "\n")
    assert load_requests(one) == load_requests(recs[:1])
    noext = tmp_path / "r.txt"  # JSON Lines is recognised by content too
    noext.write_text(p.read_text())
    assert len(load_requests(noext)) == 7


def test_rewrite_prompt_keeps_other_braces():
    r = EditRequest("1", "{x} {} likes {0} and {{y}} }{", "Ann", "tea", None)
    assert r.rewrite_prompt == "{x} Ann likes {0} and {{y}} }{"
    r2 = EditRequest("2", "In {} {braces} stay", "a{}b", "tea", None)
    assert r2.rewrite_prompt == "In a{}b {braces} stay"


def test_flat_first_occurrence_and_case_insensitive():
    (a,) = load_requests([{"prompt": "Paris is Paris", "subject": "Paris", "target_new": "x"}])
    assert a.prompt == "{} is Paris" and a.rewrite_prompt == "Paris is Paris"
    (b,) = load_requests([{"src": "what does unifirst make?", "subject": "UniFirst", "alt": "b",
                           "answers": ["a"]}])
    assert (b.prompt, b.subject, b.rewrite_prompt) == ("what does {} make?", "unifirst", "what does unifirst make?")
    with pytest.raises(RequestError, match="field 'prompt': does not contain the subject 'Ann'"):
        load_requests([{"prompt": "annual report of", "subject": "Ann", "target_new": "x"}])


def test_spaced_target():
    assert spaced_target("Paris") == " Paris"
    assert spaced_target(" Paris") == " Paris"


# ----------------------------------------------------------------------------- EditRequest invariants

def test_edit_request_invariants():
    r = EditRequest("1", "{} plays", "X", "golf", None, ["p"], ["n"], ["a"], "cli")  # lists accepted
    assert r.paraphrase_prompts == ("p",) and hash(r)
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.subject = "Y"  # type: ignore[misc]
    for kwargs, field in [(dict(prompt="X plays"), "prompt"), (dict(target_new=" golf"), "target_new"),
                          (dict(target_true=""), "target_true"), (dict(neighborhood_answers=()), "neighborhood_answers"),
                          (dict(case_id=""), "case_id"), (dict(subject=" "), "subject"),
                          (dict(paraphrase_prompts=("",)), "paraphrase_prompts"), (dict(source=""), "source")]:
        with pytest.raises(RequestError, match=f"field '{field}'"):
            dataclasses.replace(r, **kwargs)


def test_to_dict_from_dict_round_trip():
    for r in load_requests(ROME5):
        d = r.to_dict()
        assert json.loads(json.dumps(d)) == d
        assert EditRequest.from_dict(d) == r
    with pytest.raises(RequestError, match="request dict has keys"):
        EditRequest.from_dict({"case_id": "1"})


# ----------------------------------------------------------------------------- writer

def test_save_round_trip_all_formats(tmp_path):
    zs = load_requests(bundled_path(ZSRE), skip_invalid=True)[:20]
    cli = requests_from_cli("Ann", "Ann likes", "tea")
    for reqs in (load_requests(bundled_path(FLAT))[:20], zs, load_requests(ROME5), cli):
        for name in ("out.json", "out.jsonl"):
            p = tmp_path / name
            save_requests(p, reqs)
            back = load_requests(p)
            assert back == [dataclasses.replace(r, source="counterfact_rome") for r in reqs]
    assert listing(tmp_path) == ["out.json", "out.jsonl"]  # no temp files left
    rec = to_rome_record(zs[0])
    assert rec["neighborhood_answers"] == list(zs[0].neighborhood_answers)
    assert "neighborhood_answers" not in to_rome_record(load_requests(ROME5)[0])
    assert to_rome_record(zs[0])["case_id"] == 0


def test_save_case_id_types(tmp_path):
    r = requests_from_cli("Ann", "Ann likes", "tea")[0]
    assert to_rome_record(dataclasses.replace(r, case_id="007"))["case_id"] == "007"
    assert to_rome_record(dataclasses.replace(r, case_id="12"))["case_id"] == 12


def test_save_invalid_writes_nothing(tmp_path):
    p = tmp_path / "out.json"
    good = load_requests(ROME5)
    with pytest.raises(RequestError, match="request 1: is a dict, not an EditRequest"):
        save_requests(p, [good[0], {"case_id": 1}])  # type: ignore[list-item]
    assert not p.exists()
    save_requests(p, good)
    before = p.read_bytes()
    with pytest.raises(RequestError):
        save_requests(p, [None])  # type: ignore[list-item]
    assert p.read_bytes() == before and listing(tmp_path) == ["out.json"]


# ----------------------------------------------------------------------------- CLI

def test_requests_from_cli_forms():
    (a,) = requests_from_cli("Danielle Darrieux", "The mother tongue of {} is", " English ", "French")
    assert (a.prompt, a.target_new, a.target_true, a.source) == ("The mother tongue of {} is", "English", "French", "cli")
    assert a.rewrite_prompt == "The mother tongue of Danielle Darrieux is"
    (b,) = requests_from_cli("Danielle Darrieux", "The mother tongue of danielle darrieux is", "English")
    assert b.prompt == "The mother tongue of {} is" and b.subject == "danielle darrieux" and b.target_true is None


@pytest.mark.parametrize("args,option", [
    (("", "x {}", "t"), "--subject"),
    (("S", "  ", "t"), "--prompt"),
    (("S", "x {}", " "), "--target"),
    ((None, "x {}", "t"), "--subject"),  # a CLI request without --subject
    (("S", "no subject here", "t"), "--prompt"),
    (("S", "{} and {}", "t"), "--prompt"),
    (("S", "x {}", "t", " "), "--target-true"),
])
def test_requests_from_cli_errors(args, option):
    with pytest.raises(RequestError, match=f"command line, {option}"):
        requests_from_cli(*args)


def test_loading_never_writes(tmp_path):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(raw(FLAT)[:3]))
    mtime = os.stat(p).st_mtime_ns
    load_requests(p)
    assert listing(tmp_path) == ["r.json"] and os.stat(p).st_mtime_ns == mtime
