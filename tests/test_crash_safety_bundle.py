"""Crash safety of the bundle writer (``mobiedit edit --bundle``; tools.reliability.kill_bundle): after a
SIGKILL at any point the bundle verifies and holds the old or the complete new journal.

* every commit call of a bundle edit (first edit of the bundle's journal, and a later one) is a
  kill point, enumerated deterministically; the bundle is checked the way the harness's
  ``bundle`` writer checks it (the base bundle exported once per session);
* the checks themselves can fail: damaged bundles and a non-atomic journal write are caught.

The files and journals (atomic_path / atomic_dir, record / undo) and the random-kill harness:
test_crash_safety.py.
"""
from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from crash_kit import count_calls, run_killed_at
from tools.reliability.killtest import temps_in


# ----------------------------------------------------------------------------- every kill point

class _BundleCase:
    """A bundle copy with the harness's request file; ``edit(k)`` applies request k through the
    bundle's programs (``edit_bundle``, the code behind ``mobiedit edit --bundle``, with a short
    search so that a run costs a fraction of a second)."""

    def __init__(self, base, tmp_path):
        import hashlib

        from tools.reliability.kill_bundle import select_requests
        from tools.reliability.kill_proc import file_digests

        self.tmp = tmp_path
        self.requests = tmp_path / "requests.json"
        self.case_ids = select_requests(str(base), str(self.requests), 3)
        self.requests_sha = hashlib.sha256(self.requests.read_bytes()).hexdigest()
        self.base_files = {k: v for k, v in file_digests(base).items() if not k.startswith("journal/")}

    def edit(self, folder, k: int):
        from mobiedit.export.ops import edit_bundle
        from mobiedit.requests import load_requests
        from mobiedit.zo import ZOConfig

        zo = ZOConfig(estimator="fzoo", n_dirs=4, h=0.05, optimizer="adam", lr=0.5, max_steps=2, max_evals=100,
                      check_every=1, seed=0)
        [res] = edit_bundle(folder, load_requests(self.requests)[k:k + 1], zo, force=True)
        assert res.applied

    def verify(self, folder) -> dict:
        from tools.reliability.kill_bundle import verify_bundle_state

        return verify_bundle_state(str(folder), self.base_files, str(self.requests), self.requests_sha,
                                   str(self.tmp / "scratch"))


@pytest.mark.parametrize("prior", [0, 1], ids=["first-edit", "later-edit"])
def test_bundle_edit_every_kill_point(tmp_path, kill_bundle_base, prior):
    """A bundle edit (base weight on the first edit, factors, journal line) killed at each of its
    commit calls: the bundle verifies and holds the old or the complete new journal."""
    import shutil

    from tools.reliability.kill_bundle import classify

    case = _BundleCase(kill_bundle_base, tmp_path)
    template, folder = tmp_path / "template", tmp_path / "bundle"
    shutil.copytree(kill_bundle_base, template)
    for k in range(prior):
        case.edit(template, k)
    before = case.verify(template)
    assert before["problems"] == [] and len(before["rows"]) == prior
    shutil.copytree(template, folder)
    n_calls = count_calls(lambda: case.edit(folder, prior))
    assert n_calls == (9 if prior == 0 else 6), n_calls  # (base,) factors, journal: fsync, replace, fsync dir
    seen = set()
    for n in range(n_calls):
        for after in (False, True):
            shutil.rmtree(folder)
            shutil.copytree(template, folder)
            assert run_killed_at(n, after, lambda: case.edit(folder, prior)) == -signal.SIGKILL
            res = case.verify(folder)
            outcome, problems = classify(before, res, case.case_ids[prior])
            assert problems == [] and outcome in ("old", "new"), (n, after, problems)
            seen.add(outcome)
            case.edit(folder, prior + 1)  # the next run works on what the kill left
            res2 = case.verify(folder)
            assert res2["problems"] == [] and res2["rows"][-1][1] == case.case_ids[prior + 1]
            assert temps_in(folder / "journal") == [] and temps_in(folder) == []
    assert seen == {"old", "new"}


# ----------------------------------------------------------------------------- the checks can fail

def test_bundle_checks_catch_damage_and_a_non_atomic_journal_write(tmp_path, kill_bundle_base):
    import shutil

    from mobiedit import journal as journal_mod
    from tools.reliability.kill_bundle import classify

    case = _BundleCase(kill_bundle_base, tmp_path)
    folder = tmp_path / "bundle"
    shutil.copytree(kill_bundle_base, folder)
    before = case.verify(folder)
    assert before["problems"] == [] and before["rows"] == [] and before["orphans"] == []
    case.edit(folder, 0)
    after = case.verify(folder)
    assert classify(before, after, case.case_ids[0]) == ("new", [])
    outcome, problems = classify(before, after, case.case_ids[1])  # not the planned request
    assert outcome == "torn" and problems

    def naive_write(dest, text):  # in place, no temporary: dies half-way
        with open(dest, "w") as fh:
            fh.write(text[: len(text) // 2])
            fh.flush()
            os.fsync(fh.fileno())  # the only commit call: killed after it
            fh.write(text[len(text) // 2:])

    def naive_edit():
        journal_mod.atomic_write_text = naive_write
        journal_mod.atomic_write_bytes = lambda dest, data: Path(dest).write_bytes(data)
        case.edit(folder, 1)

    assert run_killed_at(0, True, naive_edit) == -signal.SIGKILL
    res = case.verify(folder)
    outcome, problems = classify(after, res, case.case_ids[1])
    assert outcome == "torn" and any("unloadable" in p for p in problems), problems

    shutil.rmtree(folder)
    shutil.copytree(kill_bundle_base, folder)
    tok = folder / "tokenizer.json"
    tok.write_bytes(tok.read_bytes().replace(b'"', b"'", 1))
    problems = case.verify(folder)["problems"]
    assert any("tokenizer.json changed" in p for p in problems) and any("unloadable" in p for p in problems)

