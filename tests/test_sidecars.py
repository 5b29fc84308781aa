"""One list of what describes a model beside its weights (profile.copy_sidecars): every writer of a
derived folder (edit --out, quantize, the demo's edited copy) carries the profile, the statistics
corpus it names and the fact LM's report — a quantized fact LM keeps the corpus its profile needs."""
from __future__ import annotations

import pytest

from mobiedit.errors import ConfigError
from mobiedit.profile import FACTLM_META, PROFILE_FILE, ModelProfile, copy_sidecars, read_profile, write_profile


def test_profile_corpus_and_report_travel_together(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(), dst.mkdir()
    write_profile(src, ModelProfile(edit_layer=3, stats_corpus="file:corpus.txt"))
    (src / "corpus.txt").write_text("Paris is the capital of France\n")
    (src / FACTLM_META).write_text('{"edit_layer": 3}')
    (src / "unrelated.txt").write_text("x")
    assert sorted(copy_sidecars(src, dst)) == sorted([PROFILE_FILE, "corpus.txt", FACTLM_META])
    assert read_profile(dst).edit_layer == 3 and (dst / "corpus.txt").read_text() == (src / "corpus.txt").read_text()
    assert not (dst / "unrelated.txt").exists()


def test_nothing_to_carry_and_a_bad_profile_is_named(tmp_path):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(), dst.mkdir()
    assert copy_sidecars(src, dst) == []
    write_profile(src, ModelProfile(edit_layer=1))  # wikipedia: no file to carry
    assert copy_sidecars(src, dst) == [PROFILE_FILE]
    (src / PROFILE_FILE).write_text('{"edit_layer": -2}')
    with pytest.raises(ConfigError, match="edit_layer"):
        copy_sidecars(src, dst)
