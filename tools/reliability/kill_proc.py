"""Process plumbing of the SIGKILL harness (:mod:`~tools.reliability.killtest`): forked and
spawned writer children, a kill timer, self-delivered kills at a chosen filesystem commit call
(:func:`arm_crash_point`), and folder digests / temporaries listings for the verifiers."""
from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
import traceback
from pathlib import Path
from typing import Any, Callable


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


def file_digests(folder: str | Path) -> dict[str, str]:
    """{relative path: sha256} of every file under ``folder``."""
    root = Path(folder)
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def temps_in(folder: Path) -> list[str]:
    """Hidden temporaries / aside folders of the atomic writers in ``folder``."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(n for n in names if n.startswith(".") and (".tmp-" in n or n.endswith(".old") or n.endswith(".tmp")))


def arm_crash_point(n: int, after: bool, count_fd: int | None = None, swap_of: str | None = None) -> None:
    """In a writer child: SIGKILL this process at its ``n``-th filesystem commit call, just
    before it or just after it (``after``). ``count_fd`` receives one byte per call.

    Calls: ``os.replace`` / ``os.rename`` / ``os.fsync`` / ``shutil.rmtree`` / the renameat2
    exchange. With ``swap_of`` (a destination folder) only the calls of that folder's swap count:
    ``fsync_dir`` / ``os.replace`` / ``shutil.rmtree`` / the exchange on the folder itself, its
    parent, or its hidden temporary / aside siblings."""
    import shutil as _shutil

    from mobiedit import atomic

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

