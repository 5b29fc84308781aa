"""Tests of mobiedit.requests' validation: an invalid record's message names the record and the
field, file-level errors, unreadable inputs, and a property test that arbitrary JSON ends in a
RequestError (the loaders on valid data, the writer and the CLI: test_requests.py)."""
from __future__ import annotations

import copy
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mobiedit.errors import RequestError
from mobiedit.requests import FORMATS, load_requests
from requests_kit import ROME5, listing


# ----------------------------------------------------------------------------- validation

FLAT_REC = {"case_id": 7, "prompt": "BBC One, by", "subject": "BBC One", "target_new": "Sega",
            "ground_truth": "BBC", "rephrase_prompt": "BBC One is owned by",
            "locality_prompt": "BBC Radio, by", "locality_ground_truth": "BBC"}
ZSRE_REC = {"subject": "UniFirst", "src": "What is made by UniFirst?", "alt": "drones",
            "answers": ["uniform"], "rephrase": "UniFirst makes?", "loc": "nq question: x", "loc_ans": "y"}
ROME_REC = json.loads(ROME5.read_text())[0]


def mutate(base: dict, path: tuple, value) -> dict:
    rec = copy.deepcopy(base)
    obj = rec
    for key in path[:-1]:
        obj = obj[key]
    if value is KeyError:
        del obj[path[-1]]
    else:
        obj[path[-1]] = value
    return rec


CASES = [  # (base record, path, new value, substrings the message must contain)
    (FLAT_REC, ("prompt",), "Something else, by", ["field 'prompt'", "does not contain the subject"]),
    (FLAT_REC, ("target_new",), "   ", ["field 'target_new'", "empty"]),
    (FLAT_REC, ("target_new",), 5, ["field 'target_new'", "must be str, got int"]),
    (FLAT_REC, ("subject",), KeyError, ["field 'subject'", "missing field"]),
    (FLAT_REC, ("subject",), "  ", ["field 'subject'", "empty"]),
    (FLAT_REC, ("rephrase_prompt",), {"a": 1}, ["field 'rephrase_prompt'", "must be list or str"]),
    (FLAT_REC, ("rephrase_prompt",), ["ok", 3], ["field 'rephrase_prompt[1]'"]),
    (FLAT_REC, ("locality_ground_truth",), KeyError, ["field 'locality_ground_truth'", "0 answers for 1"]),
    (FLAT_REC, ("prompt",), "{} BBC One, by", ["field 'prompt'", "already contains"]),
    (FLAT_REC, ("ground_truth",), [], ["field 'ground_truth'", "must be str"]),
    (FLAT_REC, ("case_id",), 1.5, ["field 'case_id'", "must be int or str"]),
    (FLAT_REC, ("case_id",), True, ["field 'case_id'"]),
    (ROME_REC, ("requested_rewrite", "prompt"), "David Robinson plays", ["field 'requested_rewrite.prompt'", "exactly one"]),
    (ROME_REC, ("requested_rewrite", "prompt"), "{} and {}", ["field 'requested_rewrite.prompt'"]),
    (ROME_REC, ("requested_rewrite",), KeyError, ["field 'requested_rewrite'", "missing"]),
    (ROME_REC, ("requested_rewrite",), "x", ["field 'requested_rewrite'", "must be dict"]),
    (ROME_REC, ("requested_rewrite", "target_new", "str"), KeyError, ["field 'requested_rewrite.target_new.str'"]),
    (ROME_REC, ("requested_rewrite", "target_new", "str"), "", ["field 'requested_rewrite.target_new.str'", "empty"]),
    (ROME_REC, ("requested_rewrite", "target_true"), KeyError, ["field 'requested_rewrite.target_true'"]),
    (ROME_REC, ("paraphrase_prompts",), "one string", ["field 'paraphrase_prompts'", "must be list"]),
    (ROME_REC, ("neighborhood_prompts",), [None], ["field 'neighborhood_prompts[0]'"]),
    (ROME_REC, ("requested_rewrite", "subject"), 3, ["field 'requested_rewrite.subject'"]),
    (ZSRE_REC, ("answers",), [], ["field 'answers'", "non-empty list"]),
    (ZSRE_REC, ("answers",), KeyError, ["field 'answers'", "missing"]),
    (ZSRE_REC, ("answers",), [" "], ["field 'answers[0]'", "empty"]),
    (ZSRE_REC, ("src",), "What is made by them?", ["field 'src'", "subject"]),
    (ZSRE_REC, ("alt",), "", ["field 'alt'", "empty"]),
    (ZSRE_REC, ("loc_ans",), KeyError, ["field 'loc_ans'"]),
]


@pytest.mark.parametrize("base,path,value,expect", CASES, ids=[f"{c[1]}={c[2]!r}" for c in CASES])
def test_invalid_record_message_names_record_and_field(tmp_path, base, path, value, expect):
    good = copy.deepcopy(base)
    good.pop("case_id", None)
    bad = mutate(base, path, value)
    f = tmp_path / "reqs.json"
    f.write_text(json.dumps([good, bad]))
    before = listing(tmp_path)
    with pytest.raises(RequestError) as ei:
        load_requests(f)
    msg = str(ei.value)
    assert "record 1" in msg and "fix:" in msg
    if "case_id" in base and path != ("case_id",):
        assert f"case_id {base['case_id']}" in msg
    for s in expect:
        assert s in msg
    assert listing(tmp_path) == before  # nothing written
    assert len(load_requests(f, skip_invalid=True)) == 1


def test_record_not_object_and_duplicates():
    with pytest.raises(RequestError, match="record 1: must be a JSON object, got list"):
        load_requests([FLAT_REC, [1, 2]], fmt="counterfact_flat")
    with pytest.raises(RequestError, match=r"record 1 \(case_id 7\), field 'case_id': duplicates record 0"):
        load_requests([FLAT_REC, FLAT_REC])
    with pytest.raises(RequestError, match="every record is invalid"):
        load_requests([FLAT_REC, FLAT_REC, {"prompt": 1, "target_new": 2}][2:], skip_invalid=True)


@pytest.mark.parametrize("content,expect", [
    (b"", "file is empty"),
    (b"[1, 2", "not valid JSON"),
    (b"not json at all", "not valid JSON"),
    (b'{"a": 1}', "top level is a JSON dict, not a list"),
    (b"\"text\"", "top level is a JSON str"),
    (b"[]", "no records"),
    (b"\xff\xfe\x00garbage", "cannot read file"),
    (b'{"prompt": "a b", "subject": "a", "target_new": "x"}\n{"prompt": \n', "line 2 is not valid JSON"),
    (b"[5]", "format not recognised (record is a int)"),
    (b'[{"foo": 1}]', "format not recognised (record is keys ['foo'])"),
])
def test_file_level_errors(tmp_path, content, expect):
    f = tmp_path / "bad.json"
    f.write_bytes(content)
    with pytest.raises(RequestError) as ei:
        load_requests(f)
    assert expect in str(ei.value) and str(f) in str(ei.value)
    assert listing(tmp_path) == ["bad.json"]


def test_unreadable_inputs(tmp_path):
    with pytest.raises(RequestError, match="file not found"):
        load_requests(tmp_path / "missing.json")
    with pytest.raises(RequestError, match="cannot read file"):
        load_requests(tmp_path)
    with pytest.raises(RequestError, match="unknown format 'csv'"):
        load_requests(ROME5, fmt="csv")
    with pytest.raises(RequestError, match="expected a path or a list"):
        load_requests(42)  # type: ignore[arg-type]


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers(-3, 3) | st.text(max_size=6)
                           | st.sampled_from(["", " ", "{}", "X", "X {}", "a X b"]),
                           lambda kids: st.lists(kids, max_size=3) | st.dictionaries(
                               st.sampled_from(["str", "id", "prompt", "subject"]), kids, max_size=3),
                           max_leaves=8)
KEYS = ["case_id", "prompt", "subject", "target_new", "ground_truth", "rephrase_prompt", "locality_prompt",
        "locality_ground_truth", "src", "alt", "answers", "rephrase", "loc", "loc_ans", "requested_rewrite",
        "paraphrase_prompts", "neighborhood_prompts", "neighborhood_answers"]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.sampled_from(KEYS), JSON_VALUES, max_size=10) | JSON_VALUES,
                min_size=1, max_size=3), st.sampled_from(("auto",) + FORMATS), st.booleans())
def test_fuzz_only_request_errors(records, fmt, skip):
    """Arbitrary JSON never escapes as KeyError/TypeError/...: either requests or RequestError."""
    try:
        reqs = load_requests(records, fmt=fmt, skip_invalid=skip)
    except RequestError as err:
        assert str(err)
        return
    for r in reqs:
        assert r.prompt.count("{}") == 1 and r.target_new == r.target_new.strip() and r.target_new

