"""The ``bundle-race`` writer of the SIGKILL harness: two concurrent writers on one bundle.

A trial starts two children on the same bundle copy, the second 0–0.3 s after the first:

* ``two-edits`` — ``mobiedit edit --bundle B --offset i --limit 1 --force`` and the same with
  offset ``j`` (two different requests);
* ``undo-vs-edit`` — ``mobiedit edit --bundle B ...`` and ``mobiedit undo B ID`` of an edit that
  is active before the trial.

One of them (45% each) or both (10%) are SIGKILLed, half at a chosen filesystem commit call
(:func:`~tools.reliability.kill_proc.arm_crash_point`), half after a random delay; the other
runs to completion (it may wait for the journal lock the victim held: the kernel drops a killed
holder's lock). :func:`classify_race` then requires, on top of the single-writer checks of
:func:`~tools.reliability.kill_bundle.verify_bundle_state` (loads with every checksum, bundle
files unchanged, every entry an edit of the bundle's module on its base weight):

* the old lines are unchanged except the undo target's status, and the old entries' files are
  byte-identical;
* the new entries have the next ids in order, status ``applied``, and each is one of the two
  planned requests **exactly once** (an id reused or an edit doubled is *torn*);
* every writer that exited 0 is reflected: an edit's request is in the journal, an undone edit is
  ``undone`` (a finished write that is missing is *lost*); a killed writer's change is absent or
  complete.

``unlocked=True`` runs the children with the journal lock disabled — the bug of issue 19 — and
is how the tests show that these checks catch lost edits and undos.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from pathlib import Path

from .kill_bundle import BundleCopies
from .kill_harness import WriterStats
from .kill_proc import Forked, _read_all, _silence, arm_crash_point, temps_in

#: commit calls of an uninterrupted run: a bundle edit (first edit of the journal / later), an undo
EDIT_CALLS, FIRST_EDIT_CALLS, UNDO_CALLS = 6, 9, 3
HANG_SECONDS = 180.0


def _race_child(argv: list[str], crash: tuple | None, count_fd: int, unlocked: bool) -> None:
    """``mobiedit <argv>`` in-process; SIGKILL at commit call ``crash`` (see kill_bundle)."""
    _silence()
    if unlocked:  # the pre-fix behaviour: no journal lock
        from mobiedit.export import ops

        ops.journal_lock = lambda *a, **k: contextlib.nullcontext()
    n, after = crash if crash is not None else (-1, False)
    arm_crash_point(n, after, count_fd)
    from mobiedit.cli import main

    os._exit(main(argv))


def edit_argv(bundle: Path, requests: Path, offset: int) -> list[str]:
    return ["--quiet", "edit", "--bundle", str(bundle), "--requests", str(requests), "--offset", str(offset),
            "--limit", "1", "--force", "--seed", "0"]


def classify_race(before: dict, after: dict, plan: list[dict]) -> tuple[str, list[str]]:
    """("ok" | "torn" | "lost", problems) of a race trial. ``plan``: per writer ``{"kind": "edit",
    "case_id"}`` or ``{"kind": "undo", "id"}``, with ``"rc"`` (0 finished, -9 killed)."""
    problems = list(after["problems"])
    old, rows = before["rows"], after["rows"]
    if rows and rows[0] == ["<unloadable>"]:
        return "torn", problems or ["unloadable"]
    undo_ids = {w["id"] for w in plan if w["kind"] == "undo"}
    head, new = rows[:len(old)], rows[len(old):]
    for o, r in zip(old, head):
        if r[:2] != o[:2] or (r[2] != o[2] and not (o[0] in undo_ids and r[2] == "undone")):
            problems.append(f"old entry {o} became {r}")
    if len(head) < len(old):
        problems.append(f"old entries lost: {old[len(head):]}")
    next_id = old[-1][0] + 1 if old else 1
    want_cases = [w["case_id"] for w in plan if w["kind"] == "edit"]
    for k, r in enumerate(new):
        if r[0] != next_id + k or r[2] != "applied":
            problems.append(f"new entry {r}: expected id {next_id + k}, applied")
    cases = [r[1] for r in new]
    for c in set(cases):
        if c not in want_cases or cases.count(c) != 1:
            problems.append(f"request {c!r} appears {cases.count(c)} times among the new entries {new}")
    changed = [f for f in before["referenced"] if f != "journal/journal.jsonl"
               and after["digests"].get(f) != before["digests"].get(f)]
    if changed:
        problems.append(f"files of the old entries changed: {changed}")
    old_lines = (before["journal_text"] or "").splitlines()
    new_lines = (after["journal_text"] or "").splitlines()
    for o_row, o_line, n_line in zip(old, old_lines, new_lines):
        if o_row[0] not in undo_ids and o_line != n_line:
            problems.append(f"the line of edit {o_row[0]} changed")
    lost = []
    for w in plan:
        if w["rc"] != 0:
            continue
        if w["kind"] == "edit" and w["case_id"] not in cases:
            lost.append(f"edit of {w['case_id']!r} finished (exit 0) but is not in the journal")
        if w["kind"] == "undo" and not any(r[0] == w["id"] and r[2] == "undone" for r in rows):
            lost.append(f"undo of edit {w['id']} finished (exit 0) but the edit is applied")
    if problems:
        return "torn", problems + lost
    return ("lost", lost) if lost else ("ok", [])


class RaceWriter(BundleCopies):
    """Two-writer trials (see the module docstring), run by a
    :class:`~tools.reliability.kill_harness.Harness` (rng, statistics, bookkeeping)."""

    name = "bundle-race"

    def __init__(self, harness, base: Path, unlocked: bool = False) -> None:
        self._init_copies(harness, base, "bundle_race", min_requests=4)
        self.unlocked = unlocked
        self.lost = 0
        self.modes: dict[str, int] = {}
        shutil.rmtree(self.root, ignore_errors=True)
        self.state = self._rotate()

    def _next_offset(self, taken: set[int]) -> int:
        while True:
            off = self.k % len(self.case_ids)
            self.k += 1
            if off not in taken:
                return off

    def _begin(self) -> tuple[dict, list[dict]]:
        """(the state the trial starts from, its plan). When the slots cannot take two more edits
        a fresh copy of the base is started *first*, so the returned state is the one the writers
        will change (comparing against the full bundle left behind counted a fresh one as torn)."""
        if self.state["active"] + 2 > self.state["slots"]:
            self._rotate()
        return self.state, self._plan()

    def _plan(self) -> list[dict]:
        active = [r[0] for r in self.state["rows"] if r[2] == "applied"]
        offs: set[int] = set()
        a = self._next_offset(offs)
        writers = [{"kind": "edit", "offset": a, "case_id": self.case_ids[a]}]
        if active and self.h.rng.random() < 0.5:
            writers.append({"kind": "undo", "id": self.h.rng.choice(active)})
        else:
            b = self._next_offset(offs | {a})
            writers.append({"kind": "edit", "offset": b, "case_id": self.case_ids[b]})
        self.h.rng.shuffle(writers)
        return writers

    def _argv(self, w: dict) -> list[str]:
        if w["kind"] == "edit":
            return edit_argv(self.folder(), self.requests, w["offset"])
        return ["--quiet", "undo", str(self.folder()), str(w["id"])]

    def _typical(self) -> float:
        recent = sorted(self.runs[-9:]) or [2.0]
        return recent[len(recent) // 2]

    def trial(self) -> None:
        h = self.h
        st_ = h.stats.setdefault(self.name, WriterStats())
        before, plan = self._begin()
        mode = "undo-vs-edit" if any(w["kind"] == "undo" for w in plan) else "two-edits"
        self.modes[mode] = self.modes.get(mode, 0) + 1
        u = h.rng.random()
        victims = [0] if u < 0.45 else [1] if u < 0.9 else [0, 1]
        fresh = not before["rows"]
        T = self._typical()
        for i, w in enumerate(plan):
            w["kill"] = None
            if i in victims:
                if h.rng.random() < 0.5:
                    calls = UNDO_CALLS if w["kind"] == "undo" else FIRST_EDIT_CALLS if fresh else EDIT_CALLS
                    w["crash"] = (h.rng.randrange(calls), h.rng.random() < 0.5)
                    st_.call_kills_planned += 1
                else:
                    w["kill"] = h.rng.uniform(0.0, 1.1 * T)
        t0 = time.monotonic()
        skew = h.rng.uniform(0.0, 0.3)
        children = []
        for i, w in enumerate(plan):
            if i == 1:
                time.sleep(skew)
            r, wfd = os.pipe()
            children.append((Forked(_race_child, self._argv(w), w.get("crash"), wfd, self.unlocked), r))
            os.close(wfd)
        pending = {i for i, w in enumerate(plan) if w["kill"] is not None}
        while any(c.poll() is None for c, _ in children):
            now = time.monotonic() - t0
            if now > HANG_SECONDS:  # a writer that never ends is a failure of its own
                for c, _ in children:
                    if c.poll() is None:
                        c.kill()
                break
            for i in list(pending):
                if now >= plan[i]["kill"] + (skew if i == 1 else 0.0):
                    if children[i][0].poll() is None:
                        children[i][0].kill()
                    pending.discard(i)
            time.sleep(0.002)
        took = time.monotonic() - t0
        kills = 0
        for w, (c, r) in zip(plan, children):
            w["rc"] = c.wait()
            w["calls"] = len(_read_all(r))
            os.close(r)
            kills += int(w["rc"] == -signal.SIGKILL)
        temps = sorted(set(temps_in(self.folder()) + temps_in(self.folder() / "journal")))
        res = self._verify()
        outcome, problems = classify_race(before, res, plan)
        bad = [w for w in plan if w["rc"] not in (0, -signal.SIGKILL)]
        if took > HANG_SECONDS:
            problems.append(f"writers still running after {HANG_SECONDS:.0f} s (deadlock?)")
            outcome = "torn" if outcome == "ok" else outcome
        if bad:
            problems.append(f"writers failed: {[(w['kind'], w['rc']) for w in bad]}")
            outcome = "torn" if outcome == "ok" else outcome
        self.lost += int(outcome == "lost")
        st_.trials += 1
        st_.kills += kills
        st_.call_kills += sum(1 for w in plan if w.get("crash") and w["rc"] == -signal.SIGKILL)
        st_.completed += int(kills == 0)
        st_.new += int(outcome == "ok" and len(res["rows"]) > len(before["rows"]))
        st_.old += int(outcome == "ok" and len(res["rows"]) == len(before["rows"]))
        st_.torn += int(outcome in ("torn", "lost"))
        st_.leftovers_seen += int(bool(temps))
        st_.orphans_seen += int(bool(res["orphans"]))
        info = {"mode": mode, "writers": [{k: w[k] for k in ("kind", "rc", "calls") if k in w} for w in plan],
                "kill": [w.get("crash") or (round(w["kill"], 3) if w["kill"] is not None else None) for w in plan],
                "entries": len(res["rows"]), "ran": round(took, 3)}
        if problems:
            h.torn_details.append({"writer": self.name, "trial": st_.trials, "outcome": outcome,
                                   "problems": problems, **info})
        if h.verbose:
            import json
            import sys

            flag = f"{outcome.upper()} " + "; ".join(problems) if problems else "ok"
            print(f"  {self.name:<14} #{st_.trials:<4} kills={kills} {json.dumps(info)[:150]:<152} {flag}",
                  file=sys.stderr, flush=True)
        if problems:
            self._rotate()
        else:
            self.state = res
        if kills == 0:
            self.runs.append(took)

    def final_checks(self) -> dict:
        """Two uninterrupted concurrent edits on the last state: both applied, nothing left over."""
        before, plan = self._begin()
        plan = [w for w in plan if w["kind"] == "edit"]
        if len(plan) < 2:
            b = self._next_offset({w["offset"] for w in plan})
            plan.append({"kind": "edit", "offset": b, "case_id": self.case_ids[b]})
        children = []
        for w in plan:
            r, wfd = os.pipe()
            children.append((Forked(_race_child, self._argv(w), None, wfd, self.unlocked), r))
            os.close(wfd)
        for w, (c, r) in zip(plan, children):
            w["rc"] = c.wait()
            _read_all(r)
            os.close(r)
        res = self._verify()
        outcome, problems = classify_race(before, res, plan)
        ok = outcome == "ok" and all(w["rc"] == 0 for w in plan) and len(res["rows"]) == len(before["rows"]) + 2
        left = temps_in(self.folder()) + [f"journal/{t}" for t in temps_in(self.folder() / "journal")]
        return {"race_run_ok": ok, "race_final_problems": problems, "race_leftovers": left,
                "race_lost_trials": self.lost, "race_modes": self.modes}
