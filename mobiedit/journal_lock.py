"""One writer per journal: an exclusive advisory lock on ``<journal folder>/.lock``.

Every writer of a bundle's (or a model folder's) journal — ``mobiedit edit --bundle``, ``mobiedit
undo`` / ``bundle-undo``, and the Android app (``FileChannel.lock()`` on the same file, see
docs/bundle_format.md) — holds this lock from reading the journal to its last write. A second
writer waits up to ``timeout`` seconds and then fails with :class:`JournalBusyError`; it never
proceeds without the lock. Readers (``mobiedit run``) do not lock: every journal write is an
atomic rename, so a reader sees the old or the new journal.

The lock is a POSIX record lock over the whole file (``fcntl.lockf(LOCK_EX)``, i.e. ``fcntl
F_SETLK`` — the lock Java's ``FileChannel.lock()`` takes, so the app and the CLI exclude each
other; BSD ``flock`` locks would not) on a file that is created once and never deleted (deleting it
would let two writers lock two different files). The kernel drops the lock when its holder exits,
also on SIGKILL, so a killed writer never leaves a bundle locked. The file holds the holder's pid
and host (for the error message only). POSIX locks belong to the process and are released when
*any* descriptor of the file is closed, so within one process the lock is re-entrant: a nested
:func:`journal_lock` on the same folder reuses the held lock and never closes its descriptor.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import time
from pathlib import Path
from typing import Iterator

from .errors import JournalError

LOCK_FILE = ".lock"
#: seconds a second writer waits for the lock by default
DEFAULT_TIMEOUT = 60.0
_HELD: set[tuple[int, str]] = set()  # (pid, lock path) this process holds; pid: a forked child holds none


class JournalBusyError(JournalError):
    """Another process holds the journal's write lock and did not release it in time."""


def _holder(fd: int) -> str:
    try:
        os.lseek(fd, 0, os.SEEK_SET)
        text = os.read(fd, 200).decode("utf-8", "replace").strip()
    except OSError:
        return ""
    return f" ({text})" if text else ""


def _same_file(fd: int, path: Path) -> bool:
    try:
        a, b = os.fstat(fd), os.stat(path)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return False
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


@contextlib.contextmanager
def journal_lock(folder: str | os.PathLike, timeout: float = DEFAULT_TIMEOUT, poll: float = 0.05
                 ) -> Iterator[Path]:
    """Hold the exclusive write lock of the journal ``folder`` (created if missing).

    Waits up to ``timeout`` seconds (0: do not wait). Raises :class:`JournalBusyError` naming the
    lock file and the holder when the lock is not free in time. Yields the lock file's path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / LOCK_FILE
    key = (os.getpid(), os.path.realpath(path))
    if key in _HELD:  # this process holds it already (see the module docstring)
        yield path
        return
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
    try:
        deadline = time.monotonic() + max(0.0, timeout)
        while True:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if _same_file(fd, path):
                    break
                # the folder was replaced while we waited (a model folder's undo swaps the whole
                # folder): this lock guards a file nobody else will lock; lock the current one
                fcntl.lockf(fd, fcntl.LOCK_UN)
                os.close(fd)
                fd = -1
                fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
                continue
            except (BlockingIOError, PermissionError):  # EAGAIN / EACCES: held by another process
                if time.monotonic() >= deadline:
                    raise JournalBusyError(
                        f"another process is writing this journal{_holder(fd)}; waited {timeout:g} s",
                        where=str(path), fix="wait for the other edit / undo to finish and run again") from None
                time.sleep(poll)
        _HELD.add(key)
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\n".encode(), 0)
            yield path
        finally:
            _HELD.discard(key)
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            fcntl.lockf(fd, fcntl.LOCK_UN)
    finally:
        if fd >= 0:
            os.close(fd)
