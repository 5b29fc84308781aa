"""The model profile's ``requests`` (the facts a model knows): the request file ``bench``,
``sequential``, ``tune`` and ``trace`` use when no ``--requests`` is given — so a real checkpoint
is benchmarked on facts it knows, not on the fact LM's CounterFact set (mobiedit.resolve.request_file)."""
from __future__ import annotations

import json

import pytest

from mobiedit.errors import ConfigError
from mobiedit.profile import PROFILE_FILE, ModelProfile, copy_sidecars, read_profile, write_profile
from mobiedit.requests import bundled_path, load_requests
from mobiedit.resolve import request_file


def test_the_flag_wins_then_the_profile_then_counterfact(tmp_path):
    assert request_file(None, tmp_path) == bundled_path("counterfact-edit-1k.json")  # no profile
    write_profile(tmp_path, ModelProfile(edit_layer=1))
    assert request_file(None, tmp_path) == bundled_path("counterfact-edit-1k.json")  # profile names none
    write_profile(tmp_path, ModelProfile(edit_layer=1, requests="bundled:known/smollm2-135m.json"))
    known = request_file(None, tmp_path)
    assert known.name == "smollm2-135m.json" and known.parent.name == "known"
    assert len(load_requests(known)) > 100
    assert request_file(tmp_path / "mine.json", tmp_path) == tmp_path / "mine.json"  # --requests wins
    (tmp_path / "facts.json").write_text(bundled_path("counterfact-edit-1k.json").read_text())
    write_profile(tmp_path, ModelProfile(edit_layer=1, requests="file:facts.json"))
    assert request_file(None, tmp_path) == tmp_path / "facts.json"


def test_a_missing_or_malformed_entry_is_named(tmp_path):
    write_profile(tmp_path, ModelProfile(edit_layer=1, requests="file:gone.json"))
    with pytest.raises(ConfigError, match="field 'requests'") as e:
        request_file(None, tmp_path)
    assert "--requests" in e.value.fix
    for bad in ("known/x.json", "file:../x.json", "file:a/b.json", "bundled:../x.json", "bundled:/etc/x",
                "bundled:", "file:", 3):
        (tmp_path / PROFILE_FILE).write_text(json.dumps({"edit_layer": 1, "requests": bad}))
        with pytest.raises(ConfigError, match="'requests'"):
            read_profile(tmp_path)


def test_a_file_entry_travels_with_the_model(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(), dst.mkdir()
    write_profile(src, ModelProfile(edit_layer=2, stats_corpus="file:corpus.txt", requests="file:facts.json"))
    (src / "corpus.txt").write_text("text\n")
    (src / "facts.json").write_text("[]")
    assert sorted(copy_sidecars(src, dst)) == sorted([PROFILE_FILE, "corpus.txt", "facts.json"])


def test_a_registry_profile_from_before_the_field_gains_it(tmp_path):
    """A cached checkpoint's profile written before ``requests`` existed gets the registry's entry;
    what the file already holds (a user's layer, a user's ``requests``) is kept."""
    from mobiedit.checkpoints import _ensure_profile, checkpoint

    ck = checkpoint("smollm2-135m")
    (tmp_path / PROFILE_FILE).write_text(json.dumps({"edit_layer": 7, "stats_corpus": "wikipedia"}))
    _ensure_profile(ck, tmp_path)
    prof = read_profile(tmp_path)
    assert prof.requests == "bundled:known/smollm2-135m.json" and prof.edit_layer == 7
    assert prof.chat_template is True  # absent before: the registry's
    (tmp_path / PROFILE_FILE).write_text(json.dumps({"edit_layer": 7, "requests": ""}))
    _ensure_profile(ck, tmp_path)
    assert read_profile(tmp_path).requests == "" and read_profile(tmp_path).edit_layer == 7
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _ensure_profile(ck, fresh)
    assert read_profile(fresh) == ModelProfile(**ck.profile)


def test_trace_write_profile_keeps_the_traced_requests(tmp_path):
    """``trace --write-profile --requests K``: the model was just shown to know K's facts, so K is
    copied into the folder and becomes the profile's default requests; a trace without
    ``--requests`` leaves the profile's entry alone; noise (the model does not know them) writes nothing."""
    from types import SimpleNamespace

    from mobiedit.cli.trace import KNOWN_REQUESTS_FILE, _write_profile

    model = tmp_path / "model"
    model.mkdir()
    known = tmp_path / "k.json"
    known.write_text(bundled_path("counterfact-edit-1k.json").read_text())
    lm = SimpleNamespace(path=model, tokenizer=SimpleNamespace(chat_template=None))
    knows, noise = SimpleNamespace(p_clean=0.9), SimpleNamespace(p_clean=0.01)
    with pytest.raises(ConfigError, match="does not know"):
        _write_profile(None, lm, noise, 3, "why", known)
    assert not (model / PROFILE_FILE).exists() and not (model / KNOWN_REQUESTS_FILE).exists()
    _write_profile(None, lm, knows, 3, "why", known)
    prof = read_profile(model)
    assert (prof.edit_layer, prof.requests) == (3, f"file:{KNOWN_REQUESTS_FILE}")
    assert request_file(None, model) == model / KNOWN_REQUESTS_FILE
    assert (model / KNOWN_REQUESTS_FILE).read_text() == known.read_text()
    _write_profile(None, lm, knows, 4, "again", None)  # no --requests: the entry stays
    assert (read_profile(model).edit_layer, read_profile(model).requests) == (4, f"file:{KNOWN_REQUESTS_FILE}")
