"""Crash safety of the writers: after a SIGKILL at any point the previous state is intact and
loads, and the new state is complete or absent (tools.reliability.killtest).

* every filesystem commit call of atomic_path / atomic_dir (both swap paths) and of a journal
  record / undo is a kill point, enumerated deterministically (before and after the call);
* the random-kill harness runs ``mobiedit edit --out``, a journal loop and ``mobiedit edit
  --bundle`` with 24 SIGKILLs (the base bundle exported once per session);
* the checks themselves can fail: a non-atomic writer and damaged folders are caught.

The bundle writer's kill points and checks: test_crash_safety_bundle.py.
"""
from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from mobiedit import atomic
from mobiedit.atomic import atomic_dir, atomic_path, atomic_write_text, recover_dir, remove_stale_temps
from crash_kit import count_calls, run_killed_at
from tools.reliability.killtest import (
    folder_digest, journal_factors, journal_plan, journal_step, temps_in, verify_edit_state, verify_journal_state,
)

ROOT = Path(__file__).resolve().parents[1]  # tools.reliability runs from the repository root


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------- every kill point

@pytest.mark.parametrize("fallback", [False, True], ids=["exchange", "two-renames"])
def test_atomic_dir_every_kill_point(tmp_path, fallback):
    dest = tmp_path / "model"
    old = {"config.json": b'{"v": 1}', "sub/w.bin": b"\x01" * 5000}
    new = {"config.json": b'{"v": 2}', "sub/w.bin": b"\x02" * 7000, "extra.txt": b"x"}

    def write_tree(files):
        def write():
            with atomic_dir(dest) as tmp:
                for name, data in files.items():
                    (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                    (tmp / name).write_bytes(data)
        return write

    write_tree(old)()
    n_calls = count_calls(write_tree(new), fallback)
    assert n_calls >= 6
    outcomes = set()
    for n in range(n_calls):
        for after in (False, True):
            if _tree(dest) != old:
                write_tree(old)()
            rc = run_killed_at(n, after, write_tree(new), fallback)
            assert rc == -signal.SIGKILL
            recover_dir(dest)  # what load_model / Journal.open do when dest is missing
            got = _tree(dest)
            assert got in (old, new), f"torn at call {n} (after={after}): {sorted(got)}"
            outcomes.add("old" if got == old else "new")
            write_tree(new)()  # the next run works and clears the killed writer's temporaries
            assert _tree(dest) == new and temps_in(tmp_path) == [], temps_in(tmp_path)
    assert outcomes == {"old", "new"}


def test_atomic_path_every_kill_point(tmp_path):
    dest = tmp_path / "journal.jsonl"
    old, new = "a\n" * 1000, "b\n" * 3000

    def write():
        atomic_write_text(dest, new)

    n_calls = count_calls(write)
    outcomes = set()
    for n in range(n_calls):
        for after in (False, True):
            dest.write_text(old)
            assert run_killed_at(n, after, write) == -signal.SIGKILL
            got = dest.read_text()
            assert got in (old, new)
            outcomes.add(got == new)
            remove_stale_temps(tmp_path)
            assert temps_in(tmp_path) == []
    assert outcomes == {False, True}


def _toy_journal(folder: Path, ops: int):
    """A journal after ``ops`` planned operations (killtest's plan), and the planned state."""
    from mobiedit.families import FAMILIES
    from mobiedit.journal import Journal, apply_factors
    from tools.reliability.toy import JOURNAL_MODULES, toy_llama

    fam, model, j = FAMILIES["llama"], toy_llama(), Journal.open(folder)
    state: list = []
    for k in range(ops):
        kind, arg = journal_plan(k, [e.id for e in j.entries(active_only=True)])
        if kind == "record":
            weight = model.get_submodule(JOURNAL_MODULES[arg]).weight
            u, w = journal_factors(k)
            j.record({"k": k}, "killtest", fam, arg, JOURNAL_MODULES[arg], u, w, weight.detach().clone())
            with torch.no_grad():
                weight.copy_(apply_factors(weight, u, w, True))
        else:
            j.undo(arg, model, fam)
        state = journal_step(state, k)
    return j, model, state


@pytest.mark.parametrize("ops", [0, 3, 4], ids=["first-record", "undo", "record-after-undo"])
def test_journal_operation_every_kill_point(tmp_path, ops):
    """Operation number ``ops`` (a record creating base + factors + line, an undo, a record on a
    module with history) killed at each of its commit calls."""
    import shutil

    from mobiedit.families import FAMILIES
    from mobiedit.journal import apply_factors
    from tools.reliability.toy import JOURNAL_MODULES

    template = tmp_path / "template"
    _, _, before = _toy_journal(template, ops)
    after_state = journal_step(before, ops)
    folder = tmp_path / "j"

    def op():
        from mobiedit.journal import Journal
        from tools.reliability.toy import toy_llama

        j = Journal.open(folder)
        model = toy_llama()
        if j.entries():
            j.bake(model, FAMILIES["llama"])
        kind, arg = journal_plan(ops, [e.id for e in j.entries(active_only=True)])
        if kind == "record":
            weight = model.get_submodule(JOURNAL_MODULES[arg]).weight
            u, w = journal_factors(ops)
            j.record({"k": ops}, "killtest", "llama", arg, JOURNAL_MODULES[arg], u, w, weight.detach().clone())
            with torch.no_grad():
                weight.copy_(apply_factors(weight, u, w, True))
        else:
            j.undo(arg, model, FAMILIES["llama"])

    shutil.copytree(template, folder)
    n_calls = count_calls(op)
    seen = set()
    for n in range(n_calls):
        for after in (False, True):
            shutil.rmtree(folder)
            shutil.copytree(template, folder)
            assert run_killed_at(n, after, op) == -signal.SIGKILL
            res = verify_journal_state(str(folder))
            assert res["problems"] == [], (n, after, res)
            assert res["state"] in (before, after_state), (n, after, res["state"])
            seen.add(res["state"] == after_state)
    assert seen == {False, True}


# ----------------------------------------------------------------------------- stale temporaries, modes, recovery

def test_stale_temporaries_of_dead_writers_are_removed_live_ones_kept(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    host = atomic._host()
    dead_file = tmp_path / f".a.json.tmp-{host}-{proc.pid}-abcd1234.tmp"
    dead_dir = tmp_path / f".out.tmp-{host}-{proc.pid}-zz9_x1y2.tmp"
    live = tmp_path / f".b.json.tmp-{host}-{os.getppid()}-abcd1234.tmp"
    other_host = tmp_path / f".c.json.tmp-otherhost-{proc.pid}-abcd1234.tmp"
    foreign = tmp_path / ".d.json.abcd1234.tmp"  # not our naming scheme
    dead_file.write_text("x")
    dead_dir.mkdir()
    (dead_dir / "model.safetensors").write_bytes(b"0" * 100)
    for p in (live, other_host, foreign):
        p.write_text("x")
    atomic_write_text(tmp_path / "z.txt", "new")  # any write into the folder cleans up
    assert not dead_file.exists() and not dead_dir.exists()
    assert live.exists() and other_host.exists() and foreign.exists()


def test_results_get_normal_permissions(tmp_path):
    umask = os.umask(0o022)
    os.umask(umask)
    atomic_write_text(tmp_path / "f.txt", "a")
    assert stat.S_IMODE((tmp_path / "f.txt").stat().st_mode) == 0o666 & ~umask
    os.chmod(tmp_path / "f.txt", 0o640)
    atomic_write_text(tmp_path / "f.txt", "b")
    assert stat.S_IMODE((tmp_path / "f.txt").stat().st_mode) == 0o640
    with atomic_dir(tmp_path / "d") as tmp:
        (tmp / "x").write_text("1")
    assert stat.S_IMODE((tmp_path / "d").stat().st_mode) == 0o777 & ~umask
    with atomic_path(tmp_path / "g.bin", suffix=".safetensors") as tmp:
        tmp.write_bytes(b"1")
    assert stat.S_IMODE((tmp_path / "g.bin").stat().st_mode) == 0o666 & ~umask


def test_readers_put_back_a_folder_left_aside(tmp_path, tiny_llama_dir):
    """A kill between atomic_dir's two renames leaves only ``.NAME.old``; readers recover it."""
    import shutil

    from mobiedit.journal import Journal
    from mobiedit.models import load_model

    out = tmp_path / "out"
    shutil.copytree(tiny_llama_dir, tmp_path / ".out.old")
    assert load_model(out).model is not None and out.is_dir() and not (tmp_path / ".out.old").exists()
    j, _, _ = _toy_journal(tmp_path / "template", 2)
    shutil.move(str(j.folder), str(tmp_path / ".journal.old"))
    assert len(Journal.open(tmp_path / "journal").entries()) == 2


def test_journal_open_after_a_kill_while_creating_it(tmp_path):
    """A kill before the first journal.jsonl rename leaves only a temporary; the next open works."""
    from mobiedit.journal import Journal

    folder = tmp_path / "j"

    def create():
        Journal.open(folder)

    assert run_killed_at(0, False, create) == -signal.SIGKILL
    assert not (folder / "journal.jsonl").exists() and temps_in(folder)
    assert Journal.open(folder).entries() == [] and temps_in(folder) == []


# ----------------------------------------------------------------------------- the checks can fail

def test_a_non_atomic_writer_is_caught(tmp_path):
    """Writing in place (no temporary + rename) and dying mid-way is detected as torn."""
    dest = tmp_path / "journal.jsonl"
    old, new = "a\n" * 100, "b\n" * 100
    dest.write_text(old)

    def naive():
        with open(dest, "w") as fh:
            fh.write(new[:50])
            fh.flush()
            os.fsync(fh.fileno())  # call 0: killed after it -> half-written file
            fh.write(new[50:])

    assert run_killed_at(0, True, naive) == -signal.SIGKILL
    assert dest.read_text() not in (old, new)


def test_verifiers_report_damage(tmp_path, tiny_llama_dir):
    import shutil

    j, _, state = _toy_journal(tmp_path / "j", 6)
    assert verify_journal_state(str(j.folder)) == {"state": state, "problems": []}
    text = (j.folder / "journal.jsonl").read_text()
    (j.folder / "journal.jsonl").write_text(text[:-10])
    assert verify_journal_state(str(j.folder))["problems"][0].startswith("unloadable")

    base_digest = folder_digest(tiny_llama_dir)
    out = tmp_path / "out"
    shutil.copytree(tiny_llama_dir, out)
    res = verify_edit_state(str(out), str(tiny_llama_dir), base_digest, str(tmp_path / "cache"))
    assert res["problems"] and "no journal" in res["problems"][0]
    from mobiedit.journal import Journal

    Journal.open(out / "journal")
    res = verify_edit_state(str(out), str(tiny_llama_dir), base_digest, str(tmp_path / "cache"))
    assert res["problems"] == [] and res["state"] == []
    blob = (out / "model.safetensors").read_bytes()
    (out / "model.safetensors").write_bytes(blob[: len(blob) // 2])
    res = verify_edit_state(str(out), str(tiny_llama_dir), base_digest, str(tmp_path / "cache"))
    assert res["problems"] and "unloadable" in res["problems"][0]


# ----------------------------------------------------------------------------- the random-kill harness

def test_killtest_harness_24_kills(tmp_path, tiny_llama_dir, kill_bundle_base):
    report = tmp_path / "kill.json"
    r = subprocess.run([sys.executable, "-m", "tools.reliability.killtest", "--edit", "2", "--edit-fallback", "1",
                        "--journal", "17", "--bundle", "4", "--bundle-race", "0", "--model", str(tiny_llama_dir),
                        "--bundle-base", str(kill_bundle_base), "--work", str(tmp_path / "work"),
                        "--json", str(report), "--quiet", "--seed", "1"],
                       capture_output=True, text=True, timeout=900,
                       env={**os.environ, "OMP_NUM_THREADS": "1"}, cwd=ROOT)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    rep = json.loads(report.read_text())
    assert rep["kills_total"] >= 24 and rep["torn_total"] == 0, rep["torn_details"]
    assert rep["writers"]["journal"]["kills"] == 17 and rep["writers"]["bundle"]["kills"] == 4
    assert rep["writers"]["edit"]["kills"] == 2 and rep["writers"]["edit-fallback"]["kills"] == 1
    assert rep["final"]["journal_run_ok"] and rep["final"]["bundle_run_ok"]
    assert not any(rep["final"]["leftovers_after_final_runs"].values())
    assert rep["bundle"]["base"] == str(kill_bundle_base) and rep["bundle"]["runtime"] == "onnxruntime"
    assert "kills survived: 24 SIGKILLs" in r.stdout
