"""The ``bundle`` writer of the SIGKILL harness (:mod:`~tools.reliability.killtest`).

A trial is ``mobiedit edit --bundle B --requests R --offset K --limit 1 --force --seed 0``
(``export/cli.py: bundle_edit``; one request: a run appends one journal entry) in a child forked
from the pre-imported harness, on ``B``, a copy of one base bundle exported per harness run. The
child is SIGKILLed (40%) by itself just before / after its n-th filesystem commit call
(:func:`~tools.reliability.kill_proc.arm_crash_point`), (30%) at a random instant of its
write phase (timed from its first commit call, reported on a pipe), or (30%) after a random
delay. Trials chain on the state the previous one left; a fresh copy of the base starts when the
active edits fill the bundle's slots (so first edits, which also write ``base.safetensors``,
are killed again and again).

:func:`verify_bundle_state` (a forked child, on a scratch copy so that the writer's leftovers
stay for the next run) checks that the bundle loads (:func:`~mobiedit.export.bundle.load_bundle`,
every checksum) and its journal opens, that files outside ``journal/`` and the request file are
unchanged, and that every entry is a ``mobiedit-bundle`` edit of the manifest's module on the
bundle's base weight. :func:`classify` then requires exactly the old state (entries,
``journal.jsonl`` and the files it references byte-identical) or the complete new one (plus one
applied entry for the planned request, old lines and files unchanged). Unreferenced files in
``journal/`` (factors / base written before a kill ahead of the journal line; the journal's
documented orphans, overwritten by the next record) are counted, not torn.
"""
from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import signal
import time
from pathlib import Path

from .kill_harness import WriterStats
from .kill_proc import Forked, _read_all, _silence, arm_crash_point, file_digests, fork_call, kill_after, temps_in

BUNDLE_SLOTS = 8
N_REQUESTS = 16
METHOD = "mobiedit-bundle"


# ----------------------------------------------------------------------------- base bundle and requests

def bundle_config(runtime: str):
    """A small fp32 export (the shapes of tests/export_kit.py, ``BUNDLE_SLOTS`` slots)."""
    from mobiedit.export.config import EditSetup, EditShapes, ExportConfig, InferenceShapes, LowerConfig, QuantizeConfig
    from mobiedit.editing.config import ContextConfig

    return ExportConfig(inference=InferenceShapes(max_seq_len=48, prefill_chunk=8, slots=BUNDLE_SLOTS),
                        edit_shapes=EditShapes(K=5, rows=4, suffix=20, prefix=24, targets=24, kl=1),
                        quant=QuantizeConfig(scheme="fp32", calibration_batches=2),
                        lower=LowerConfig(runtime=runtime),
                        edit=EditSetup(layer=1, context=ContextConfig(lengths=((2, 2),)), stats_limit=100))


def make_base_bundle(model: str, out: str, runtime: str) -> float:
    """Export ``model`` to the bundle ``out`` (runs in a forked child); returns the seconds taken."""
    import torch

    from mobiedit.export.bundle import export_bundle

    torch.set_num_threads(1)
    t0 = time.monotonic()
    export_bundle(model, out, bundle_config(runtime))
    return time.monotonic() - t0


def bundle_info(path: str) -> dict:
    """Runtime, slots and journal length of a verified bundle (raises if it does not load)."""
    from mobiedit.export.bundle import load_bundle

    b = load_bundle(path)
    return {"runtime": b.runtime, "slots": b.manifest["slots"], "entries": len(b.journal().entries())}


def ensure_base_bundle(work: Path, model: Path, runtime: str) -> tuple[Path, float]:
    """``work/bundle_base``: reused when it loads and has the runtime, else exported (once per
    work folder). Returns (path, export seconds; 0.0 when reused)."""
    out = work / "bundle_base"
    if (out / "manifest.json").is_file():
        try:
            info = fork_call(bundle_info, str(out))
            if info["runtime"] == runtime and info["entries"] == 0:
                return out, 0.0
        except RuntimeError:
            pass
    return out, fork_call(make_base_bundle, str(model), str(out), runtime)


def select_requests(bundle: str, out: str, n: int) -> list[str]:
    """Write to ``out`` the first ``n`` bundled CounterFact records that fit the bundle's edit
    shapes; returns their case ids (runs in a forked child)."""
    import torch

    from mobiedit.atomic import atomic_write_text
    from mobiedit.errors import BundleError
    from mobiedit.export.bundle import load_bundle
    from mobiedit.export.verify import edit_shapes_of
    from mobiedit.export.packing import pack_edit
    from mobiedit.requests import bundled_path, load_requests
    from mobiedit.editing.config import ObjectiveConfig
    from mobiedit.editing.context import build_edit_inputs

    torch.set_num_threads(1)
    b = load_bundle(bundle)
    m = b.manifest
    objective = ObjectiveConfig(**m["edit"]["objective"])
    records = json.loads(bundled_path("counterfact-edit-1k.json").read_text())
    kept = []
    for rec, req in zip(records, load_requests(records)):
        try:
            pack_edit(build_edit_inputs(b.tokenizer(), req, m["edit"]["templates"], objective), edit_shapes_of(m), objective)
        except BundleError:
            continue
        kept.append(rec)
        if len(kept) == n:
            break
    atomic_write_text(out, json.dumps(kept))
    return [str(r["case_id"]) for r in kept]


# ----------------------------------------------------------------------------- child and verifier

def bundle_argv(bundle: Path, requests: Path, offset: int) -> list[str]:
    return ["--quiet", "edit", "--bundle", str(bundle), "--requests", str(requests), "--offset", str(offset),
            "--limit", "1", "--force", "--seed", "0"]


def _bundle_child(argv: list[str], crash: tuple | None, count_fd: int) -> None:
    """``mobiedit edit --bundle`` in-process; one byte on ``count_fd`` per commit call, SIGKILL
    at call ``crash[0]`` (before it, or after it with ``crash[1]``)."""
    _silence()
    n, after = crash if crash is not None else (-1, False)
    arm_crash_point(n, after, count_fd)
    from mobiedit.cli import main

    os._exit(main(argv))


def verify_bundle_state(path: str, base_files: dict[str, str], requests: str, requests_sha: str,
                        scratch: str) -> dict:
    """Check a bundle after a trial (runs in a forked child; reads ``path``, verifies a copy of
    it at ``scratch`` so that readers' clean-ups do not hide the writer's leftovers)."""
    import torch

    from mobiedit.errors import MobiEditError
    from mobiedit.export.bundle import load_bundle
    from mobiedit.journal import tensor_sha256

    torch.set_num_threads(1)
    root = Path(path)
    problems: list[str] = []
    digests = file_digests(root)
    temps = temps_in(root) + [f"journal/{t}" for t in temps_in(root / "journal")]
    for name, sha in base_files.items():
        if digests.get(name) != sha:
            problems.append(f"bundle file {name} changed (or is missing)")
    extra = [n for n in digests if not n.startswith("journal/") and n not in base_files and n not in temps]
    if extra:
        problems.append(f"unexpected files in the bundle: {extra}")
    if hashlib.sha256(Path(requests).read_bytes()).hexdigest() != requests_sha:
        problems.append("the request file changed")
    rows: list[list] = [["<unloadable>"]]
    referenced: list[str] = []
    active = slots = 0
    shutil.rmtree(scratch, ignore_errors=True)
    shutil.copytree(root, scratch, symlinks=True)
    try:
        b = load_bundle(scratch)
        m = b.manifest
        slots = m["slots"]
        journal = b.journal()
        entries = journal.entries()
        base = b.keystats()["base_weight"]
        base_sha = tensor_sha256(base)
        want = (METHOD, m["edit_module"], m["edit_layer"], m["model_family"])
        for e in entries:
            if (e.method, e.module, e.layer, e.family) != want:
                problems.append(f"edit {e.id}: {e.method} on {e.module} (layer {e.layer}, {e.family}) is not a "
                                f"bundle edit of {m['edit_module']}")
            if e.base_sha256 != base_sha:
                problems.append(f"edit {e.id}: base_sha256 is not the bundle's base weight")
        active = len(journal.entries(active_only=True))
        if entries:
            if not torch.equal(journal.base_weight(m["edit_module"]), base):
                problems.append("journal base.safetensors differs from the bundle's base weight")
            if not torch.isfinite(journal.rebuild(m["edit_module"])).all():
                problems.append("the journal's rebuild is non-finite")
            if active <= slots:
                b.slots(journal)
        rows = [[e.id, str(e.request.get("case_id")), e.status] for e in entries]
        referenced = ["journal/journal.jsonl"] + [f"journal/{e.factors}" for e in entries] + \
            (["journal/base.safetensors"] if entries else [])
    except MobiEditError as e:
        problems.append(f"unloadable: {e}")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    jpath = root / "journal" / "journal.jsonl"
    orphans = sorted(n for n in digests if n.startswith("journal/") and n not in referenced and n not in temps
                     and n != "journal/.lock")  # the writers' lock file (mobiedit.journal_lock) is no orphan
    return {"rows": rows, "digests": digests, "referenced": referenced, "orphans": orphans, "temps": temps,
            "journal_text": jpath.read_text() if jpath.is_file() else None, "active": active, "slots": slots,
            "problems": problems}


def classify(before: dict, after: dict, case_id: str) -> tuple[str, list[str]]:
    """("old" | "new" | "torn", problems) of a trial that edited ``case_id`` on ``before``."""
    problems = list(after["problems"])
    old_rows, rows = before["rows"], after["rows"]
    next_id = old_rows[-1][0] + 1 if old_rows else 1
    changed = [f for f in before["referenced"] if after["digests"].get(f) != before["digests"].get(f)]
    if rows == old_rows:
        outcome = "old"
        if changed:
            problems.append(f"same journal entries but referenced files changed: {changed}")
    elif rows == old_rows + [[next_id, case_id, "applied"]]:
        outcome = "new"
        changed = [f for f in changed if f != "journal/journal.jsonl"]
        if changed:
            problems.append(f"files of the old entries changed: {changed}")
        if not (after["journal_text"] or "").startswith(before["journal_text"] or ""):
            problems.append("the old journal lines changed")
    else:
        outcome = "torn"
        problems.append(f"journal {rows[-3:]} is neither the old {old_rows[-3:]} nor old + "
                        f"[{next_id}, {case_id!r}, 'applied']")
    return outcome, problems


# ----------------------------------------------------------------------------- trials

class BundleCopies:
    """Fresh copies ``b000, b001, …`` of a base bundle under ``work/<stem>``, the bundled requests
    that fit it, and the verifier of a copy's state (run on a scratch copy in a forked child);
    shared by the one-writer (:class:`BundleWriter`) and two-writer (``kill_race.RaceWriter``) trials."""

    def _init_copies(self, harness, base: Path, stem: str, min_requests: int) -> None:
        self.h, self.base = harness, Path(base)
        work = harness.work
        self.root, self.scratch = work / stem, work / f"{stem}_verify"
        self.requests = work / f"{stem}_requests.json"
        self.case_ids = fork_call(select_requests, str(self.base), str(self.requests), N_REQUESTS)
        if len(self.case_ids) < min_requests:
            raise RuntimeError(f"only {len(self.case_ids)} bundled requests fit the bundle {self.base}")
        self.requests_sha = hashlib.sha256(self.requests.read_bytes()).hexdigest()
        self.base_files = {k: v for k, v in file_digests(self.base).items() if not k.startswith("journal/")}
        self.index, self.k = -1, 0
        self.runs: list[float] = []        # durations of uninterrupted runs

    def folder(self) -> Path:
        return self.root / f"b{self.index:03d}"

    def _verify(self) -> dict:
        return fork_call(verify_bundle_state, str(self.folder()), self.base_files, str(self.requests),
                         self.requests_sha, str(self.scratch))

    def _rotate(self) -> dict:
        """Continue on a fresh copy of the base bundle (the previous copy is removed)."""
        old = self.folder() if self.index >= 0 else None
        self.index += 1
        shutil.copytree(self.base, self.folder(), symlinks=True)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        state = self._verify()
        if state["problems"]:
            raise RuntimeError(f"the base bundle does not verify: {state['problems']}")
        self.state = state
        return state


class BundleWriter(BundleCopies):
    """The bundle writer's trials, run by a :class:`~tools.reliability.kill_harness.Harness`
    (its rng, statistics and bookkeeping)."""

    name = "bundle"

    def __init__(self, harness, base: Path) -> None:
        self._init_copies(harness, base, "bundle", min_requests=2)
        self.calls: dict[bool, int] = {}   # commit calls of an uninterrupted run (key: first edit of the journal)
        self.write_times: list[float] = []  # seconds from the first commit call to the exit, uninterrupted runs
        shutil.rmtree(self.root, ignore_errors=True)
        self.state = self._rotate()

    def _start(self, crash: tuple | None) -> tuple[Forked, int, str, bool]:
        if self.state["active"] >= self.state["slots"]:
            self._rotate()
        offset = self.k % len(self.case_ids)
        self.k += 1
        r, w = os.pipe()
        child = Forked(_bundle_child, bundle_argv(self.folder(), self.requests, offset), crash, w)
        os.close(w)
        return child, r, self.case_ids[offset], not self.state["rows"]

    def calibrate(self) -> tuple[bool, float, dict]:
        """One uninterrupted run on the current state: (ok, seconds, verification)."""
        before = self.state
        t0 = time.monotonic()
        child, r, case_id, fresh = self._start(None)
        first = os.read(r, 1)  # returns at the run's first commit call
        t1 = time.monotonic()
        n_calls = len(first) + len(_read_all(r))
        os.close(r)
        rc = child.wait()
        t2 = time.monotonic()
        took = t2 - t0
        res = self._verify()
        outcome, problems = classify(before, res, case_id)
        ok = rc == 0 and outcome == "new" and not problems
        if ok:
            self.state = res
            self.runs.append(took)
            self.write_times.append(t2 - t1 if first else 0.0)
            self.calls[fresh] = n_calls
        return ok, took, {"rc": rc, "outcome": outcome, "problems": problems}

    def run_time(self) -> float:
        recent = sorted((self.runs[1:] if len(self.runs) > 1 else self.runs)[-7:])
        return recent[len(recent) // 2]

    def write_time(self) -> float:
        recent = sorted(self.write_times[-7:])
        return recent[len(recent) // 2]

    def trial(self) -> None:
        h = self.h
        st_ = h.stats.setdefault(self.name, WriterStats())
        while True:  # calibrate: run time, and commit calls on a fresh and on a used journal
            if self.state["active"] >= self.state["slots"]:
                self._rotate()
            fresh = not self.state["rows"]
            if len(self.runs) >= 3 and fresh in self.calls:
                break
            ok, _, info = self.calibrate()
            if not ok:
                raise RuntimeError(f"uninterrupted bundle edit run failed: {info}")
        T = self.run_time()
        # 40% of the kills at a chosen commit call of the run (just before or just after it); 30% at
        # a random instant of the write phase (timed from the run's first commit call, so they land
        # inside writes, between calls); 30% after a delay: half anywhere in the run, half in its last 20%
        crash, mode, u = None, "delay", h.rng.random()
        if u < 0.4:
            mode, crash = "call", (h.rng.randrange(self.calls[fresh]), h.rng.random() < 0.5)
            st_.call_kills_planned += 1
            frac, T = 10.0, max(T, 1.0)  # the timer is only a safety net
        elif u < 0.7:
            mode, frac = "write", h.rng.uniform(0.0, 1.1)  # of the write phase
        else:
            frac = h.rng.uniform(0.0, 1.05) if h.rng.random() < 0.5 else h.rng.uniform(0.8, 1.03)
        before = self.state
        child, r, case_id, fresh = self._start(crash)
        first, t_first = b"", 0.0
        if mode == "write":
            t0 = time.monotonic()
            if select.select([r], [], [], max(10 * T, 10.0))[0]:
                first = os.read(r, 1)
            t_first = time.monotonic() - t0
            delay = frac * self.write_time()
        else:
            delay = frac * T
        killed, rc, ran = kill_after(child.poll, child.kill, child.wait, delay)
        ran += t_first
        if crash is not None:
            killed = child.wait() == -signal.SIGKILL
            st_.call_kills += int(killed)
        n_calls = len(first) + len(_read_all(r))
        os.close(r)
        temps = sorted(set(temps_in(self.folder()) + temps_in(self.folder() / "journal") + temps_in(self.root)))
        res = self._verify()
        outcome, problems = classify(before, res, case_id)
        if not killed and (rc != 0 or outcome != "new"):
            problems.append(f"writer finished (rc={rc}) but the state is {outcome}")
        st_.orphans_seen += int(bool(res["orphans"]))
        st_.write_phase_kills += int(killed and n_calls > 0)
        st_.write_timed_kills += int(killed and mode == "write")
        info = ({"at_call": list(crash)} if crash else {"write_phase_delay": round(delay, 4)} if mode == "write"
                else {"delay": round(delay, 3)})
        h._record(self.name, st_, killed, outcome, problems,
                  {"call": -1.0, "write": (t_first + delay) / T, "delay": frac}[mode], False, temps,
                  {**info, "ran": round(ran, 3), "calls": n_calls, "fresh": fresh,
                   "entries": len(res["rows"]), "orphans": len(res["orphans"])})
        if problems:
            self._rotate()  # go on from a clean state; the torn one is in torn_details
        else:
            self.state = res
        if not killed and rc == 0 and mode != "write":
            self.runs.append(ran)
            self.calls[fresh] = n_calls

    def final_checks(self) -> dict:
        """An uninterrupted run on the last state must succeed and leave no temporaries."""
        ok, took, info = self.calibrate()
        left = temps_in(self.folder()) + [f"journal/{t}" for t in temps_in(self.folder() / "journal")] + \
            temps_in(self.root)
        return {"bundle_run_ok": ok, "bundle_seconds": took, "bundle_final": info, "bundle_leftovers": left,
                "bundle_orphans_after_final_run": self.state["orphans"]}
