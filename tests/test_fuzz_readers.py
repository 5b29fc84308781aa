"""Fuzz / property tests of every reader of untrusted input (tools.reliability.fuzz).

Each target gets a modest example budget here (about 2,000 in total); the full run is
``python -m tools.reliability.fuzz --examples 10000``. A crash — any exception other than the
reader's own MobiEditError subclass with a location, or an accepted-but-invalid result — fails
the test and hypothesis shrinks it to a minimal input.
"""
from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mobiedit.errors import JournalError, MobiEditError, RequestError
from tools.reliability import fuzz as F

BUDGET = {  # examples per target in CI (~2,000 in total, ~15 s)
    "requests.file": 300, "requests.counterfact_rome": 250, "requests.counterfact_flat": 250,
    "requests.zsre": 250, "requests.cli": 100, "requests.from_dict": 100, "journal": 250,
    "native.x0": 150, "native.losses": 150, "native.rank_one": 100, "native.raw": 150, "bundle.manifest": 200,
    "bundle.manifest_hostile": 80, "journal.hostile": 80, "model.config": 80,
}


@pytest.fixture(scope="module")
def root():
    path = Path(tempfile.mkdtemp(prefix="fuzz-tests-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_budget_covers_every_target_and_about_2000_examples():
    assert set(BUDGET) == set(F.TARGETS)
    assert 1800 <= sum(BUDGET.values()) <= 2500


@pytest.mark.parametrize("name", sorted(F.TARGETS))
def test_reader_never_crashes(name, root):
    target = F.TARGETS[name]
    outcomes = {F.ACCEPTED: 0, F.REJECTED: 0, F.BUILTIN: 0}

    @settings(max_examples=BUDGET[name], deadline=None, database=None,
              suppress_health_check=list(HealthCheck))
    @given(st.data())
    def prop(data):
        outcome, detail, desc = F.run_case(target, data, root)
        assert outcome != F.CRASH, f"{detail}\n  input: {desc}"
        outcomes[outcome] += 1

    prop()
    # the generators must reach the validation code, not only its first line
    assert outcomes[F.REJECTED] + outcomes[F.BUILTIN] >= BUDGET[name] // 3, outcomes
    if name.startswith(("requests.counterfact", "requests.zsre", "requests.file", "journal", "native.x0")):
        assert outcomes[F.ACCEPTED] >= 1, outcomes


# ----------------------------------------------------------------------------- the classifier can fail

def _case(fn, expected=(RequestError,), **kw):
    return F.Case(fn, expected, "test", **kw)


def _raise(err):
    def fn():
        raise err
    return fn


@pytest.mark.parametrize("fn,expected,outcome", [
    (lambda: None, (RequestError,), F.ACCEPTED),
    (_raise(RequestError("bad", where="record 0, field 'prompt'")), (RequestError,), F.REJECTED),
    (_raise(KeyError("prompt")), (RequestError,), F.CRASH),
    (_raise(RecursionError("deep")), (RequestError,), F.CRASH),
    (_raise(RequestError("bad")), (RequestError,), F.CRASH),                    # no location
    (_raise(JournalError("bad", where="x")), (RequestError,), F.CRASH),         # wrong type
    (_raise(RequestError("two\nlines", where="x")), (RequestError,), F.CRASH),  # not one line
])
def test_classify(fn, expected, outcome):
    assert F.classify(_case(fn, expected))[0] == outcome


def test_classify_field_and_result_checks():
    err = RequestError("bad", where="record 0 (case_id 3), field 'requested_rewrite.target_new.str'")
    assert F.classify(_case(_raise(err), fields=("requested_rewrite.target_new",)))[0] == F.REJECTED
    assert F.classify(_case(_raise(err), fields=("subject",)))[0] == F.CRASH
    assert F.classify(_case(lambda: [1], check=lambda r: "not requests"))[0] == F.CRASH
    builtin = F.Case(_raise(ValueError("x0 has shape (2,)")), (MobiEditError,), "t", builtin=(ValueError,),
                     builtin_names=("x0",))
    assert F.classify(builtin)[0] == F.BUILTIN
    unnamed = F.Case(_raise(ValueError("boom")), (MobiEditError,), "t", builtin=(ValueError,), builtin_names=("x0",))
    assert F.classify(unnamed)[0] == F.CRASH


# ----------------------------------------------------------------------------- regressions found by fuzzing

@pytest.mark.parametrize("text", ["[" * 100_000, '{"a": 1}\n' + "[" * 100_000,
                                  '[{"case_id": ' + "1" * 5000 + "}]", '{"a": 1}\n{"b": ' + "9" * 5000 + "}"])
def test_deep_nesting_and_huge_numbers_are_request_errors(tmp_path, text):
    from mobiedit.requests import load_requests

    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(RequestError) as info:
        load_requests(path)
    assert str(path) in info.value.where


def test_from_dict_with_mixed_key_types_and_none_lists():
    from mobiedit.requests import EditRequest

    with pytest.raises(RequestError, match="request dict has keys"):
        EditRequest.from_dict({1: "a", "b": 2})
    good = {"case_id": "1", "prompt": "{} is", "subject": "A", "target_new": "b", "target_true": None,
            "paraphrase_prompts": [], "neighborhood_prompts": None, "neighborhood_answers": ["x"], "source": "cli"}
    with pytest.raises(RequestError, match="neighborhood_prompts"):
        EditRequest.from_dict(good)


def test_unrecognised_record_with_mixed_key_types():
    from mobiedit.requests import load_requests

    with pytest.raises(RequestError, match="format not recognised"):
        load_requests([{1: "a", "b": 2}])


def test_journal_deep_nesting_and_newline_module(tmp_path):
    from mobiedit.journal import JOURNAL_FILE, Journal

    folder = tmp_path / "j"
    F.build_template_journal(folder)
    lines = (folder / JOURNAL_FILE).read_text().split("\n")[:-1]
    (folder / JOURNAL_FILE).write_text(lines[0] + "\n" + "[" * 100_000 + "\n")
    with pytest.raises(JournalError, match="line 2"):
        Journal.open(folder)
    obj = json.loads(lines[0])
    obj["module"] = "\n"
    (folder / JOURNAL_FILE).write_text(json.dumps(obj) + "\n")
    with pytest.raises(JournalError, match="field 'module'") as info:
        Journal.open(folder)
    assert "\n" not in str(info.value)


def test_native_ragged_and_object_buffers_are_project_errors():
    from mobiedit.zo import ZOConfig, rank_one_factors, run_zo

    cfg = ZOConfig(estimator="fzoo", n_dirs=2, max_steps=2)
    for x0 in ([0.0, [1.0]], [[1.0, 2.0], [3.0]], object()):
        for backend in ("native", "python"):
            with pytest.raises(MobiEditError) as info:
                run_zo(lambda D: np.zeros(D.shape[0], np.float32), None, x0, cfg, backend=backend)
            assert info.value.where == "x0"
    with pytest.raises(MobiEditError) as info:
        rank_one_factors([0.0, [1.0]], np.ones(2, np.float32), np.ones(2, np.float32))
    assert info.value.where == "k_star"


def test_fuzz_script_counts(capsys):
    rc = F.main(["--examples", "60", "--seed", "3", "--targets", "requests.file", "journal", "native.raw"])
    out = capsys.readouterr().out
    assert rc == 0, out
    import re

    assert "crashes: 0" in out and int(re.search(r"fuzzed inputs: (\d+)", out).group(1)) >= 50, out


def test_manifest_reader_names_the_field_of_a_wrongly_typed_section(tmp_path):
    """Regression: a manifest whose `programs` or `files` is not an object used to crash the reader
    with AttributeError/TypeError; it must be a BundleError naming the field."""
    import json

    from mobiedit.errors import BundleError
    from mobiedit.export.bundle import read_manifest

    for key, value in (("programs", []), ("files", 3), ("edit_layer", True)):
        folder = tmp_path / key
        folder.mkdir()
        m = F._valid_manifest(folder)
        m[key] = value
        (folder / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(BundleError, match=f"field '{key}'"):
            read_manifest(folder)


def test_manifest_reader_keeps_a_control_character_file_name_out_of_its_message(tmp_path):
    """Regression (found by the fuzzer in session 21): a `files` entry named "\\n" made the error's
    location two lines; an unprintable name is refused as unsafe, the message one line."""
    import json

    from mobiedit.errors import BundleError
    from mobiedit.export.bundle import read_manifest

    for files in ({"\n": None}, {"a\x1b[2J": {"bytes": 1, "sha256": "0" * 64}}):
        folder = tmp_path / str(len(list(tmp_path.iterdir())))
        folder.mkdir()
        m = F._valid_manifest(folder)
        m["files"] = files
        (folder / "manifest.json").write_text(json.dumps(m))
        with pytest.raises(BundleError, match="unsafe file name") as info:
            read_manifest(folder)
        assert "\n" not in str(info.value) and "\x1b" not in str(info.value)
