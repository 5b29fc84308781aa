"""SIGKILL crash-safety harness for the writers (docs/reliability.md, "Crash safety").

Each *trial* starts a writer in a child process and SIGKILLs it — after a random delay, or (for
``edit``) just before / after a randomly chosen filesystem commit call of the run or of the
output folder's swap (:func:`arm_crash_point`) — then checks in a separate verifier process that

* the previous state is intact and loads, or the new state is complete and loads — nothing in
  between (a *torn* state is any other outcome);
* the writer's input is unchanged, and no leftover breaks the next run (the next trial is that
  run; stale temporaries of killed writers are counted and must be gone after the final,
  uninterrupted run).

Writers (``WRITERS``):

* ``edit`` — ``mobiedit edit --out OUT`` on a tiny random llama (``--method rome --layer 0
  --force --limit 2``), alternating between two request slices so that the old and the new
  ``OUT`` differ. OUT loads (:func:`~mobiedit.models.load_model`), its journal opens
  (:meth:`~mobiedit.journal.Journal.open`), its edited module equals the journal's rebuild bit
  for bit, every other parameter equals the input model's, its file set is the complete one and
  its journal's edits are exactly the old or exactly the new slice. Every fifth trial deletes
  the key-statistics cache first so that kills also land in the cache writer; every cached
  statistics file must load and be finite.
* ``edit-fallback`` — the same with ``renameat2(RENAME_EXCHANGE)`` disabled in the child, so the
  folder swap takes :func:`~mobiedit.atomic.atomic_dir`'s two-rename path and recovery.
* ``journal`` — a loop of :meth:`Journal.record` / :meth:`Journal.undo` on a toy model (a fixed,
  seeded plan of operations); the child reports each finished operation on a pipe. After the
  kill the journal must equal the planned state after exactly *n* or *n + 1* operations (*n*
  reported), and every module's rebuild must equal base + the planned active factors bit for
  bit. The journal folder is rotated every ``JOURNAL_ROTATE`` entries.

Children are forked from this (pre-imported) process so that a trial costs the writer's work,
not Python's start-up; ``--spawn N`` adds N ``edit`` trials run as a fresh ``python -c`` process
instead. This process never runs torch computations itself (verification runs in forked
children), so forking is safe.

    python -m mobiedit.reliability.killtest --kills 200 --json runs/killtest.json
    python -m mobiedit.reliability.killtest --edit 4 --edit-fallback 2 --journal 14 --model DIR

The bundle writer (``mobiedit edit --bundle``) is to be added to ``WRITERS`` when export/ lands.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

JOURNAL_ROTATE = 40
EDIT_LIMIT = 2
WRITERS = ("edit", "edit-fallback", "journal")


# ----------------------------------------------------------------------------- process helpers

def _read_all(fd: int) -> bytes:
    chunks = []
    while True:
        b = os.read(fd, 1 << 16)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _silence() -> None:
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)


def fork_call(fn: Callable[..., Any], *args: Any, timeout: float = 600.0) -> Any:
    """``fn(*args)`` in a forked child; returns its JSON-serialisable result. A failure in the
    child is raised here as RuntimeError with the child's traceback."""
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:  # child
        code = 0
        try:
            os.close(r)
            try:
                out = {"ok": fn(*args)}
            except BaseException as err:  # noqa: BLE001 - reported to the parent
                out = {"error": f"{type(err).__name__}: {err}", "traceback": traceback.format_exc()}
            data = json.dumps(out).encode()
            while data:
                data = data[os.write(w, data):]
        except BaseException:  # noqa: BLE001
            code = 70
        finally:
            os._exit(code)
    os.close(w)
    deadline = time.monotonic() + timeout
    data = _read_all(r)  # returns at EOF (child exited or closed the pipe)
    os.close(r)
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            raise RuntimeError(f"{fn.__name__} timed out")
        time.sleep(0.01)
    if not data:
        raise RuntimeError(f"{fn.__name__}: child died with status {status}")
    out = json.loads(data)
    if "error" in out:
        raise RuntimeError(f"{fn.__name__} failed in child: {out['error']}\n{out['traceback']}")
    return out["ok"]


def kill_after(poll: Callable[[], int | None], kill: Callable[[], None], wait: Callable[[], int],
               delay: float) -> tuple[bool, int | None, float]:
    """SIGKILL a running child ``delay`` s from now unless it exits first.

    Returns (killed, exit code if it exited by itself, seconds it ran)."""
    t0 = time.monotonic()
    while True:
        rc = poll()
        elapsed = time.monotonic() - t0
        if rc is not None:
            return False, rc, elapsed
        if elapsed >= delay:
            kill()
            rc = wait()
            return rc == -signal.SIGKILL, (None if rc == -signal.SIGKILL else rc), elapsed
        time.sleep(min(0.002, delay - elapsed))


class Forked:
    """A forked child running ``fn(*args)`` (must not return: it calls os._exit)."""

    def __init__(self, fn: Callable[..., None], *args: Any) -> None:
        self.pid = os.fork()
        if self.pid == 0:
            try:
                fn(*args)
            finally:
                os._exit(70)
        self.rc: int | None = None

    def _decode(self, status: int) -> int:
        return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)

    def poll(self) -> int | None:
        if self.rc is None:
            done, status = os.waitpid(self.pid, os.WNOHANG)
            if done:
                self.rc = self._decode(status)
        return self.rc

    def kill(self) -> None:
        os.kill(self.pid, signal.SIGKILL)

    def wait(self) -> int:
        if self.rc is None:
            _, status = os.waitpid(self.pid, 0)
            self.rc = self._decode(status)
        return self.rc


class Spawned:
    """A fresh interpreter (``subprocess.Popen``) with the same poll/kill/wait interface."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)

    def poll(self) -> int | None:
        return self.proc.poll()

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)

    def wait(self) -> int:
        return self.proc.wait()


# ----------------------------------------------------------------------------- shared checks

def folder_digest(folder: str | Path) -> str:
    """sha256 over relative paths and bytes of every file under ``folder``."""
    h = hashlib.sha256()
    root = Path(folder)
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
    return h.hexdigest()


def temps_in(folder: Path) -> list[str]:
    """Hidden temporaries / aside folders of the atomic writers in ``folder``."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(".") and (".tmp-" in n or n.endswith(".old") or n.endswith(".tmp")))


def make_tiny_llama(path: str) -> None:
    """A tiny random llama (3 layers, width 64) with a small BPE tokenizer, saved with
    save_pretrained (the same recipe as the tests' ``tiny_llama_dir``)."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from ..factlm.train import train_tokenizer
    from ..requests import bundled_path

    torch.set_num_threads(1)
    recs = json.loads(bundled_path("counterfact-edit-1k.json").read_text())[:200]
    tok = train_tokenizer([r["prompt"] + " " + r["ground_truth"] for r in recs] + [r["target_new"] for r in recs], 512)
    torch.manual_seed(0)  # HF initialises from the global generator
    model = LlamaForCausalLM(LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                                         num_attention_heads=4, num_key_value_heads=2, vocab_size=len(tok),
                                         bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id,
                                         pad_token_id=tok.pad_token_id))
    model.save_pretrained(path, safe_serialization=True)
    tok.save_pretrained(path)


# ----------------------------------------------------------------------------- edit writer

def edit_argv(model: Path, out: Path, requests: Path, offset: int) -> list[str]:
    return ["--quiet", "edit", "--model", str(model), "--requests", str(requests), "--offset", str(offset),
            "--limit", str(EDIT_LIMIT), "--method", "rome", "--layer", "0", "--force", "--seed", "0",
            "--out", str(out)]


def arm_crash_point(n: int, after: bool, count_fd: int | None = None, swap_of: str | None = None) -> None:
    """In a writer child: SIGKILL this process at its ``n``-th filesystem commit call, just
    before it or just after it (``after``). ``count_fd`` receives one byte per call.

    Calls: ``os.replace`` / ``os.rename`` / ``os.fsync`` / ``shutil.rmtree`` / the renameat2
    exchange. With ``swap_of`` (a destination folder) only the calls of that folder's swap count:
    ``fsync_dir`` / ``os.replace`` / ``shutil.rmtree`` / the exchange on the folder itself, its
    parent, or its hidden temporary / aside siblings."""
    import shutil as _shutil

    from .. import atomic

    calls = [0]
    dest = Path(swap_of) if swap_of else None

    def relevant(args) -> bool:
        if dest is None:
            return True
        for a in args:
            if isinstance(a, (str, os.PathLike)):
                p = Path(a)
                if p in (dest, dest.parent) or p.name.startswith(f".{dest.name}."):
                    return True
        return False

    def wrap(fn):
        def inner(*a, **k):
            if not relevant(a):
                return fn(*a, **k)
            i = calls[0]
            calls[0] += 1
            if count_fd is not None:
                os.write(count_fd, b".")
            if i == n and not after:
                os.kill(os.getpid(), signal.SIGKILL)
            out = fn(*a, **k)
            if i == n and after:
                os.kill(os.getpid(), signal.SIGKILL)
            return out
        return inner

    if dest is None:
        os.rename, os.fsync = wrap(os.rename), wrap(os.fsync)
    else:
        atomic.fsync_dir = wrap(atomic.fsync_dir)
    os.replace = wrap(os.replace)
    _shutil.rmtree = wrap(_shutil.rmtree)
    atomic._exchange = wrap(atomic._exchange)


def _edit_child(argv: list[str], fallback: bool, crash: tuple | None = None) -> None:
    _silence()
    from .. import atomic

    if fallback:
        atomic._exchange = lambda a, b: False  # force the two-rename path of atomic_dir
    if crash is not None:
        arm_crash_point(*crash)
    from ..cli import main

    os._exit(main(argv))


SPAWN_CODE = ("import sys\nimport mobiedit.atomic as A\n"
              "if sys.argv[1] == '1':\n    A._exchange = lambda a, b: False\n"
              "from mobiedit.cli import main\nsys.exit(main(sys.argv[2:]))\n")


def param_digests(model_dir: str) -> dict[str, str]:
    """:func:`~mobiedit.journal.tensor_sha256` of every parameter of a model folder."""
    import torch

    from ..journal import tensor_sha256
    from ..models import load_model

    torch.set_num_threads(1)
    return {k: tensor_sha256(p) for k, p in load_model(model_dir).model.named_parameters()}


def verify_edit_state(out: str, base: str, base_digest: str, cache: str,
                      base_params: dict[str, str] | None = None) -> dict:
    """Check an ``edit --out`` folder after a kill (runs in a verifier child). ``base_params``:
    :func:`param_digests` of the input model (computed here if None)."""
    import torch
    from safetensors.torch import load_file

    from ..errors import JournalError, MobiEditError
    from ..journal import Journal, tensor_sha256
    from ..models import load_model

    torch.set_num_threads(1)
    problems: list[str] = []
    if folder_digest(base) != base_digest:
        problems.append("the input model folder changed")
    for p in sorted((Path(cache) / "stats").glob("*.safetensors")):
        try:
            if not torch.isfinite(load_file(p)["mom2"]).all():
                problems.append(f"cached statistics {p.name} are non-finite")
        except Exception as e:  # noqa: BLE001 - any failure is a torn cache file
            problems.append(f"cached statistics {p.name} do not load: {type(e).__name__}: {e}")
    outp = Path(out)
    aside = outp.parent / f".{outp.name}.old"
    recovered = not outp.exists() and aside.exists()
    if not outp.exists() and not aside.exists():
        return {"state": None, "files": [], "problems": problems, "recovered": False}
    try:
        lm = load_model(outp)  # puts an aside folder back (reader-side recovery)
        if not (outp / "journal" / "journal.jsonl").is_file():
            raise JournalError("incomplete: no journal/journal.jsonl", where=str(outp))
        journal = Journal.open(outp / "journal")
        base_params = base_params or param_digests(base)
        modules = {e.module for e in journal.entries()}
        for module in sorted(modules):
            if not torch.equal(lm.model.get_submodule(module).weight, journal.rebuild(module)):
                problems.append(f"{module} differs from the journal's rebuild")
        touched = {m + ".weight" for m in modules}
        for name, p in lm.model.named_parameters():
            if name not in touched and tensor_sha256(p) != base_params.get(name):
                problems.append(f"untouched parameter {name} differs from the input model")
        state = [str(e.request.get("case_id")) for e in journal.entries(active_only=True)]
    except MobiEditError as e:
        problems.append(f"unloadable: {e}")
        state = ["<unloadable>"]
    files = sorted(str(p.relative_to(outp)) for p in outp.rglob("*") if p.is_file())
    return {"state": state, "files": files, "problems": problems, "recovered": recovered}


# ----------------------------------------------------------------------------- journal writer

def journal_plan(k: int, active: list[int]) -> tuple[str, int]:
    """Operation ``k``: ("undo", edit id) every fourth op when something is active, else
    ("record", layer)."""
    if k % 4 == 3 and active:
        return "undo", active[(k * 7919) % len(active)]
    return "record", k % 2


def journal_factors(k: int) -> tuple[Any, Any]:
    import torch

    from .toy import D_IN, D_OUT

    gen = torch.Generator().manual_seed(10_000 + k)
    return torch.randn(D_OUT, generator=gen) * 0.1, torch.randn(D_IN, generator=gen) * 0.1


def journal_step(state: list[list], k: int) -> list[list]:
    """The planned journal state ([id, k, status] rows) after operation ``k``."""
    state = [list(r) for r in state]
    kind, arg = journal_plan(k, [r[0] for r in state if r[2] == "applied"])
    if kind == "record":
        state.append([state[-1][0] + 1 if state else 1, k, "applied"])
    else:
        for r in state:
            if r[0] == arg:
                r[2] = "undone"
    return state


def _journal_child(folder: str, k0: int, notify_fd: int, max_ops: int) -> None:
    _silence()
    import torch

    from ..families import FAMILIES
    from ..journal import Journal, apply_factors
    from .toy import JOURNAL_MODULES, toy_llama

    torch.set_num_threads(1)
    fam = FAMILIES["llama"]
    j = Journal.open(folder)
    model = toy_llama()
    if j.entries():
        j.bake(model, fam)
    for k in range(k0, k0 + max_ops):
        kind, arg = journal_plan(k, [e.id for e in j.entries(active_only=True)])
        if kind == "record":
            module = JOURNAL_MODULES[arg]
            weight = model.get_submodule(module).weight
            u, w = journal_factors(k)
            j.record({"k": k}, "killtest", fam, arg, module, u, w, weight.detach().clone())
            with torch.no_grad():
                weight.copy_(apply_factors(weight, u, w, True))
        else:
            j.undo(arg, model, fam)
        os.write(notify_fd, b".")
    os._exit(0)


def verify_journal_state(folder: str) -> dict:
    """Open a journal after a kill and rebuild every module from the planned factors."""
    import torch

    from ..errors import MobiEditError
    from ..journal import Journal, apply_factors
    from .toy import JOURNAL_MODULES, toy_llama

    torch.set_num_threads(1)
    problems: list[str] = []
    if not Path(folder).exists():
        return {"state": [], "problems": problems}
    try:
        j = Journal.open(folder)
        rows = [[e.id, e.request.get("k"), e.status] for e in j.entries()]
        base = toy_llama()
        for module in JOURNAL_MODULES:
            expect = base.get_submodule(module).weight.detach().clone()
            mine = [e for e in j.entries() if e.module == module]
            for e in mine:
                u, w = j.load_factors(e)
                pu, pw = journal_factors(e.request["k"])
                if not (torch.equal(u, pu) and torch.equal(w, pw)):
                    problems.append(f"edit {e.id}: stored factors differ from the planned ones")
                if e.active:
                    expect = apply_factors(expect, pu, pw, True)
            if mine and not torch.equal(j.rebuild(module), expect):
                problems.append(f"{module}: rebuild differs from base + planned active edits")
    except MobiEditError as e:
        problems.append(f"unloadable: {e}")
        rows = [["<unloadable>"]]
    return {"state": rows, "problems": problems}


# ----------------------------------------------------------------------------- the harness

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
        from ..requests import load_requests

        reqs = load_requests(self.requests)
        self.slices = {off: [r.case_id for r in reqs[off:off + EDIT_LIMIT]] for off in (0, EDIT_LIMIT)}
        self.edit_state: list[str] | None = None
        self.edit_files: list[str] | None = None
        self.edit_runs: dict[bool, list[float]] = {}  # durations of uninterrupted runs (fork / spawn)
        self.n_calls = 0  # filesystem commit calls of an uninterrupted edit run (exchange path)
        self.journal_k = 0
        self.journal_state: list[list] = []
        self.journal_index = 0

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


def run(kills: dict[str, int], model: Path | None, work: Path, seed: int, spawn: int = 0,
        verbose: bool = True, max_trials_factor: float = 3.0) -> dict:
    """Run trials until each writer has had its number of SIGKILLs (or ``max_trials_factor`` times
    as many trials); returns the report dict."""
    from ..requests import bundled_path

    t0 = time.monotonic()
    work.mkdir(parents=True, exist_ok=True)
    if model is None:
        model = work / "tiny_llama"
        if not (model / "model.safetensors").is_file():
            fork_call(make_tiny_llama, str(model))
    _preimport()
    h = Harness(work=work, model=model, requests=bundled_path("counterfact-edit-1k.json"), seed=seed,
                verbose=verbose)
    plan = [("edit", k) for k in range(kills.get("edit", 0))] + \
        [("edit-fallback", k) for k in range(kills.get("edit-fallback", 0))] + \
        [("journal", k) for k in range(kills.get("journal", 0))] + [("edit-spawn", k) for k in range(spawn)]
    h.rng.shuffle(plan)
    want = dict(kills, **({"edit-spawn": spawn} if spawn else {}))
    for name, _ in plan:
        while True:
            got = h.stats.get(name, WriterStats())
            if got.kills >= want[name] or got.trials >= max(5, int(max_trials_factor * want[name])):
                break
            before = got.kills
            if name == "journal":
                h.journal_trial()
            else:
                h.edit_trial(fallback=name == "edit-fallback", spawn=name == "edit-spawn")
            if h.stats[name].kills > before:
                break
    final = h.final_checks()
    report = {
        "writers": {k: asdict(v) for k, v in h.stats.items()},
        "kills_total": sum(v.kills for v in h.stats.values()),
        "trials_total": sum(v.trials for v in h.stats.values()),
        "torn_total": sum(v.torn for v in h.stats.values()),
        "torn_details": h.torn_details,
        "final": final,
        "wall_seconds": time.monotonic() - t0,
        "edit_run_seconds": {("spawn" if k else "fork"): h.edit_time(k) for k in h.edit_runs},
        "model": str(model),
        "edit_commit_calls": h.n_calls,
    }
    return report


def _preimport() -> None:
    """Import everything the writers use so that forked children start warm (no torch compute)."""
    from .. import cli

    cli._quiet_libraries()
    import torch
    import transformers  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401
    from transformers.models.llama import modeling_llama  # noqa: F401

    from .. import evaluate, journal, models, session  # noqa: F401
    from ..methods import rome, zo_edit  # noqa: F401
    from . import toy  # noqa: F401

    torch.set_num_threads(1)
    cli.build_parser()  # imports the bench / demo / export sub-commands


def format_report(rep: dict) -> str:
    head = f"{'writer':<15}{'trials':>7}{'kills':>7}{'at call':>8}{'at swap':>8}{'finished':>9}{'old':>6}" \
           f"{'new':>6}{'torn':>6}{'reader-recovered':>18}{'temps seen':>12}"
    rows = [head]
    for name, s in rep["writers"].items():
        rows.append(f"{name:<15}{s['trials']:>7}{s['kills']:>7}{s['call_kills']:>8}{s['swap_kills']:>8}"
                    f"{s['completed']:>9}{s['old']:>6}{s['new']:>6}{s['torn']:>6}{s['recovered_by_reader']:>18}"
                    f"{s['leftovers_seen']:>12}")
    f = rep["final"]
    left = sum(len(v) for v in f["leftovers_after_final_runs"].values())
    rows.append(f"kills survived: {rep['kills_total']} SIGKILLs in {rep['trials_total']} trials; torn or unloadable "
                f"states: {rep['torn_total']}; final uninterrupted runs ok: edit={f['edit_run_ok']} "
                f"journal={f['journal_run_ok']}; temporaries left after them: {left}; wall {rep['wall_seconds']:.0f}s")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m mobiedit.reliability.killtest", description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=0,
                   help="total SIGKILLs, split 35%% edit / 15%% edit-fallback / 50%% journal (overrides the three below)")
    p.add_argument("--edit", type=int, default=4)
    p.add_argument("--edit-fallback", type=int, default=2)
    p.add_argument("--journal", type=int, default=14)
    p.add_argument("--spawn", type=int, default=0, help="extra edit kills in a freshly spawned interpreter")
    p.add_argument("--model", help="HF folder to edit (default: a tiny random llama built in --work)")
    p.add_argument("--work", help="working folder (default: a new temporary folder, removed afterwards)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", help="write the report here")
    p.add_argument("--quiet", action="store_true")
    args = p.parse_args(argv)
    kills = {"edit": args.edit, "edit-fallback": args.edit_fallback, "journal": args.journal}
    if args.kills:
        e, f = round(args.kills * 0.35), round(args.kills * 0.15)
        kills = {"edit": e, "edit-fallback": f, "journal": args.kills - e - f}
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="mobiedit-killtest-"))
    try:
        rep = run(kills, Path(args.model) if args.model else None, work, args.seed, args.spawn,
                  verbose=not args.quiet)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    print(format_report(rep))
    if args.json:
        from ..atomic import atomic_write_text

        atomic_write_text(args.json, json.dumps(rep, indent=1))
    ok = rep["torn_total"] == 0 and rep["final"]["journal_run_ok"] and not any(
        rep["final"]["leftovers_after_final_runs"].values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
