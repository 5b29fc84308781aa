"""The trial loop of the SIGKILL harness (:mod:`~tools.reliability.killtest`): per-writer
statistics and the :class:`Harness` that runs ``edit`` / ``edit-fallback`` / ``journal`` trials
(the ``bundle`` writer's trials are :class:`~tools.reliability.kill_bundle.BundleWriter`)."""
from __future__ import annotations

import json
import os
import random
import shutil
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from .kill_proc import Forked, Spawned, _read_all, fork_call, folder_digest, kill_after, temps_in
from .kill_writers import (EDIT_LIMIT, SPAWN_CODE, _edit_child, _journal_child, edit_argv, journal_step,
                           param_digests, verify_edit_state, verify_journal_state)

JOURNAL_ROTATE = 40


@dataclass
class WriterStats:
    trials: int = 0
    kills: int = 0            # SIGKILL delivered while the writer was running
    call_kills: int = 0       # of which at a chosen filesystem commit call (self-delivered)
    swap_kills: int = 0       # of which at a chosen call of the output folder's swap
    call_kills_planned: int = 0
    swap_kills_planned: int = 0
    completed: int = 0        # writer finished before the kill fired
    old: int = 0              # state after the trial == state before
    new: int = 0              # state after the trial == the writer's complete new state
    torn: int = 0
    recovered_by_reader: int = 0
    leftovers_seen: int = 0   # trials after which temporaries were present
    orphans_seen: int = 0     # bundle: trials after which unreferenced journal files were present
    write_phase_kills: int = 0  # bundle: kills after the run's first filesystem commit call
    write_timed_kills: int = 0  # bundle: kills timed at a random instant after the first commit call
    kill_fraction: list[float] = field(default_factory=list)  # delay / calibrated run time


@dataclass
class Harness:
    work: Path
    model: Path
    requests: Path
    seed: int = 0
    verbose: bool = True
    stats: dict[str, WriterStats] = field(default_factory=dict)
    torn_details: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.out = self.work / "edit" / "out"
        self.cache = self.work / "cache"
        os.environ["MOBIEDIT_CACHE"] = str(self.cache)
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
        self.base_digest = folder_digest(self.model)
        self.base_params = fork_call(param_digests, str(self.model))
        from mobiedit.requests import load_requests

        reqs = load_requests(self.requests)
        self.slices = {off: [r.case_id for r in reqs[off:off + EDIT_LIMIT]] for off in (0, EDIT_LIMIT)}
        self.edit_state: list[str] | None = None
        self.edit_files: list[str] | None = None
        self.edit_runs: dict[bool, list[float]] = {}  # durations of uninterrupted runs (fork / spawn)
        self.n_calls = 0  # filesystem commit calls of an uninterrupted edit run (exchange path)
        self.journal_k = 0
        self.journal_state: list[list] = []
        self.journal_index = 0
        shutil.rmtree(self.work / "journal", ignore_errors=True)  # a reused --work starts the plan afresh

    # -- edit ------------------------------------------------------------------
    def _edit_child(self, offset: int, fallback: bool, spawn: bool, crash=None):
        argv = edit_argv(self.model, self.out, self.requests, offset)
        if spawn:
            return Spawned([sys.executable, "-c", SPAWN_CODE, "1" if fallback else "0", *argv], dict(os.environ))
        return Forked(_edit_child, argv, fallback, crash)

    def commit_calls(self, fallback: bool) -> int:
        """Filesystem commit calls of one uninterrupted ``edit --out`` (counted during the
        calibration runs; the two-rename swap makes one call more than the exchange)."""
        return self.n_calls + int(fallback)

    def calibrate_edit(self, spawn: bool = False) -> float:
        """One uninterrupted run: sets the reference state / file set and the run time."""
        offset = EDIT_LIMIT if self.edit_state == self.slices[0] else 0
        t0 = time.monotonic()
        r, w = (None, None) if spawn else os.pipe()
        child = self._edit_child(offset, False, spawn, None if spawn else (-1, False, w, None))
        if w is not None:
            os.close(w)
            n_calls = len(_read_all(r))
            os.close(r)
        rc = child.wait()
        took = time.monotonic() - t0
        res = fork_call(verify_edit_state, str(self.out), str(self.model), self.base_digest, str(self.cache),
                        self.base_params)
        if rc != 0 or res["problems"] or res["state"] != self.slices[offset]:
            raise RuntimeError(f"uninterrupted edit run failed: rc={rc} {res}")
        self.edit_state, self.edit_files = res["state"], res["files"]
        self.edit_runs.setdefault(spawn, []).append(took)
        if not spawn:
            self.n_calls = n_calls
        return took

    def edit_time(self, spawn: bool) -> float:
        """Typical run time: the median of the last uninterrupted runs (the first, cold run, and
        runs that recomputed the key statistics excluded once there are others)."""
        runs = self.edit_runs[spawn]
        recent = sorted((runs[1:] if len(runs) > 1 else runs)[-7:])
        return recent[len(recent) // 2]

    def edit_trial(self, fallback: bool, spawn: bool = False) -> None:
        name = "edit-spawn" if spawn else ("edit-fallback" if fallback else "edit")
        st_ = self.stats.setdefault(name, WriterStats())
        while len(self.edit_runs.get(spawn, [])) < 2 or not self.n_calls:
            self.calibrate_edit(spawn and len(self.edit_runs.get(True, [])) < 2)
        T = self.edit_time(spawn)
        # 40% of the kills at a chosen filesystem commit call, just before or after it: half at
        # any call of the run, half at a call of OUT's folder swap (fsync of the new folder,
        # exchange or the two renames, fsync of the parent, removal of the old content); of the
        # rest half after a delay anywhere in the run, half in its last 20%
        crash = None
        if not spawn and self.rng.random() < 0.4:
            after = self.rng.random() < 0.5
            if self.rng.random() < 0.5:
                crash = (self.rng.randrange(self.commit_calls(fallback)), after, None, None)
                st_.call_kills_planned += 1
            else:
                crash = (self.rng.randrange(4 + int(fallback)), after, None, str(self.out))
                st_.swap_kills_planned += 1
            frac, T = 10.0, max(T, 1.0)  # the timer is only a safety net
        else:
            frac = self.rng.uniform(0.0, 1.05) if self.rng.random() < 0.5 else self.rng.uniform(0.8, 1.03)
        fresh_stats = st_.trials % 5 == 4  # the child recomputes and writes the key statistics
        if fresh_stats:
            shutil.rmtree(self.cache / "stats", ignore_errors=True)
        offset = EDIT_LIMIT if self.edit_state == self.slices[0] else 0
        prev = self.edit_state
        child = self._edit_child(offset, fallback, spawn, crash)
        killed, rc, ran = kill_after(child.poll, child.kill, child.wait, frac * T)
        if crash is not None:
            killed = child.wait() == -signal.SIGKILL
            if crash[3] is None:
                st_.call_kills += int(killed)
            else:
                st_.swap_kills += int(killed)
        res = fork_call(verify_edit_state, str(self.out), str(self.model), self.base_digest, str(self.cache),
                        self.base_params)
        state = res["state"]
        problems = list(res["problems"])
        if state == prev:
            outcome = "old"
        elif state == self.slices[offset]:
            outcome = "new"
        else:
            outcome = "torn"
            problems.append(f"state {state} is neither the old {prev} nor the new {self.slices[offset]}")
        if state is not None and self.edit_files is not None and res["files"] != self.edit_files:
            problems.append(f"file set {res['files']} != complete set {self.edit_files}")
        if not killed and (rc != 0 or outcome != "new"):
            problems.append(f"writer finished (rc={rc}) but the state is {outcome}")
        info = ({("at_swap_call" if crash[3] else "at_call"): list(crash[:2])} if crash
                else {"delay": round(frac * T, 3)})
        self._record(name, st_, killed, outcome, problems, -1.0 if crash else frac, res.get("recovered", False),
                     temps_in(self.out.parent), {**info, "ran": round(ran, 3), "state": state})
        if state is not None and not problems:
            self.edit_state = state
        if not killed and rc == 0 and not fresh_stats:
            self.edit_runs[spawn].append(ran)

    # -- journal ---------------------------------------------------------------
    def journal_folder(self) -> Path:
        return self.work / "journal" / f"j{self.journal_index:03d}"

    def journal_trial(self) -> None:
        st_ = self.stats.setdefault("journal", WriterStats())
        if len(self.journal_state) >= JOURNAL_ROTATE:
            self.journal_index += 1
            self.journal_state = []
        folder = self.journal_folder()
        folder.parent.mkdir(parents=True, exist_ok=True)
        r, w = os.pipe()
        delay = self.rng.uniform(0.0, 0.35)
        child = Forked(_journal_child, str(folder), self.journal_k, w, 10_000)
        os.close(w)
        killed, rc, ran = kill_after(child.poll, child.kill, child.wait, delay)
        n_done = len(_read_all(r))
        os.close(r)
        res = fork_call(verify_journal_state, str(folder))
        problems = list(res["problems"])
        planned = [self.journal_state]
        for i in range(n_done + 1):
            planned.append(journal_step(planned[-1], self.journal_k + i))
        state = res["state"]
        if state == planned[n_done]:
            outcome, applied = ("old" if n_done == 0 else "new"), n_done
        elif state == planned[n_done + 1]:
            outcome, applied = "new", n_done + 1
        else:
            outcome, applied = "torn", n_done
            problems.append(f"journal after {n_done} reported ops matches neither {n_done} nor {n_done + 1} "
                            f"planned ops: {state[-3:]} vs {planned[n_done][-3:]}")
        if not killed:
            problems.append(f"journal writer exited by itself (rc={rc})")
        self._record("journal", st_, killed, outcome, problems, delay / 0.35, False, temps_in(folder),
                     {"delay": delay, "ops_reported": n_done, "ops_applied": applied})
        if not problems:
            self.journal_state = planned[applied]
            self.journal_k += applied

    # -- bookkeeping -------------------------------------------------------------
    def _record(self, name: str, st_: WriterStats, killed: bool, outcome: str, problems: list[str], frac: float,
                recovered: bool, temps: list[str], info: dict) -> None:
        st_.trials += 1
        st_.kills += int(killed)
        st_.completed += int(not killed)
        if problems:
            outcome = "torn"
        setattr(st_, outcome, getattr(st_, outcome) + 1)
        st_.recovered_by_reader += int(recovered)
        st_.leftovers_seen += int(bool(temps))
        st_.kill_fraction.append(round(frac, 3))
        if problems:
            self.torn_details.append({"writer": name, "trial": st_.trials, "problems": problems, **info})
        if self.verbose:
            flag = "TORN " + "; ".join(problems) if problems else outcome
            print(f"  {name:<14} #{st_.trials:<4} {'killed' if killed else 'finished':<8} "
                  f"{json.dumps(info)[:110]:<112} {flag}", file=sys.stderr, flush=True)

    def final_checks(self) -> dict:
        """An uninterrupted edit and a short journal run must succeed and leave no temporaries."""
        took = self.calibrate_edit(False)
        folder = self.journal_folder()
        r, w = os.pipe()
        child = Forked(_journal_child, str(folder), self.journal_k, w, 3)
        os.close(w)
        rc = child.wait()
        n = len(_read_all(r))
        os.close(r)
        res = fork_call(verify_journal_state, str(folder))
        state = self.journal_state
        for i in range(n):
            state = journal_step(state, self.journal_k + i)
        journal_ok = rc == 0 and n == 3 and not res["problems"] and res["state"] == state
        leftovers = {"edit": temps_in(self.out.parent), "journal": temps_in(folder),
                     "cache": temps_in(self.cache / "stats")}
        return {"edit_run_ok": True, "edit_seconds": took, "journal_run_ok": journal_ok,
                "leftovers_after_final_runs": leftovers}

