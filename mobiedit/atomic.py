"""Crash-safe writes: temporary file in the same directory, fsync, rename, fsync the directory.

Invariant: after any crash (even SIGKILL) at any point, the destination path holds either its
previous complete content or the new complete content — never a torn mix.

Temporary names are ``.<dest name>.tmp-<host>-<pid>-<random>[suffix].tmp`` beside ``dest``. A
crash leaves such a file or folder behind; the next write into the same folder removes those
whose writer (same host, pid no longer running) is gone, so crashes do not accumulate copies.
The result gets ``dest``'s previous permission bits, or the umask default for a new path (not the
0600 / 0700 of ``mkstemp`` / ``mkdtemp``).
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import re
import shutil
import socket
import stat
import tempfile
from pathlib import Path
from typing import Iterator


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory so that a rename inside it is durable."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _umask() -> int:
    """The process umask, read without changing it where /proc allows."""
    try:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(dest: Path, default: int) -> int:
    """Permission bits for the new ``dest``: the old one's, else ``default`` minus the umask."""
    try:
        return stat.S_IMODE(dest.stat().st_mode)
    except OSError:
        return default & ~_umask()


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9]", "", socket.gethostname())[:32] or "host"


def _tmp_prefix(dest: Path) -> str:
    return f".{dest.name}.tmp-{_host()}-{os.getpid()}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists but belongs to someone else, or cannot tell
        return True
    return True


def remove_stale_temps(folder: str | os.PathLike) -> list[Path]:
    """Delete the temporary files / folders in ``folder`` left by crashed writers on this host.

    Only names of the form ``.<name>.tmp-<this host>-<pid>-<random>...tmp`` whose ``pid`` is not
    running are removed; a live writer's temporary is never touched. Returns what was removed.
    """
    folder = Path(folder)
    pat = re.compile(r"\..+\.tmp-" + re.escape(_host()) + r"-(\d+)-[a-z0-9_]{8}.*\.tmp")
    removed: list[Path] = []
    try:
        names = os.listdir(folder)
    except OSError:
        return removed
    for name in names:
        m = pat.fullmatch(name)
        if m is None or int(m.group(1)) == os.getpid() or _pid_alive(int(m.group(1))):
            continue
        path = folder / name
        try:
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            else:
                path.unlink()
            removed.append(path)
        except FileNotFoundError:
            pass
    return removed


@contextlib.contextmanager
def atomic_path(dest: str | os.PathLike, suffix: str = "") -> Iterator[Path]:
    """Yield a temporary path beside ``dest``; on clean exit fsync it and rename it over ``dest``.

    The caller writes the file at the yielded path (by any library). On an exception the temporary
    file is removed and ``dest`` is untouched.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temps(dest.parent)
    fd, tmp = tempfile.mkstemp(prefix=_tmp_prefix(dest), suffix=suffix + ".tmp", dir=dest.parent)
    os.close(fd)
    tmp_path = Path(tmp)
    try:
        yield tmp_path
        with open(tmp_path, "rb+") as fh:
            os.fsync(fh.fileno())
        os.chmod(tmp_path, _mode_for(dest, 0o666))
        os.replace(tmp_path, dest)
        fsync_dir(dest.parent)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp_path.unlink()
        raise


def atomic_write_bytes(dest: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``dest`` atomically."""
    with atomic_path(dest) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(dest: str | os.PathLike, text: str) -> None:
    """Write ``text`` (UTF-8) to ``dest`` atomically."""
    atomic_write_bytes(dest, text.encode("utf-8"))


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two existing paths with Linux ``renameat2(RENAME_EXCHANGE)``.

    Returns False where the call is unavailable (non-Linux, old libc, unsupported filesystem).
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    rc = fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return rc == 0


def recover_dir(dest: str | os.PathLike) -> None:
    """Finish or roll back an interrupted non-atomic :func:`atomic_dir` replacement.

    If ``dest`` is missing but its ``.old`` sibling exists, the crash happened between the two
    renames: the old folder is put back. A leftover ``.old`` beside a present ``dest`` is removed.
    """
    dest = Path(dest)
    old = dest.parent / f".{dest.name}.old"
    if old.exists():
        if dest.exists():
            shutil.rmtree(old)
        else:
            os.replace(old, dest)
            fsync_dir(dest.parent)


@contextlib.contextmanager
def atomic_dir(dest: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory beside ``dest``; on clean exit it replaces ``dest`` atomically.

    Every file in the directory is fsynced before the swap. An existing ``dest`` is exchanged with
    the new folder in one ``renameat2(RENAME_EXCHANGE)`` call and then deleted, so a crash leaves
    either the complete old or the complete new folder at ``dest``. Where that call is unavailable
    the old folder is renamed aside first and :func:`recover_dir` (run at the start of every call)
    puts it back if a crash fell between the two renames.
    """
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    recover_dir(dest)
    remove_stale_temps(dest.parent)
    tmp = Path(tempfile.mkdtemp(prefix=_tmp_prefix(dest), suffix=".tmp", dir=dest.parent))
    try:
        yield tmp
        os.chmod(tmp, _mode_for(dest, 0o777))
        for root, _dirs, files in os.walk(tmp):
            for name in files:
                with open(os.path.join(root, name), "rb") as fh:
                    os.fsync(fh.fileno())
            fsync_dir(root)
        if dest.exists() and _exchange(tmp, dest):
            fsync_dir(dest.parent)
            shutil.rmtree(tmp)  # now holds the old content
            return
        old = dest.parent / f".{dest.name}.old"
        if dest.exists():
            os.replace(dest, old)
        os.replace(tmp, dest)
        fsync_dir(dest.parent)
        if old.exists():
            shutil.rmtree(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def save_png(fig, dest: str | os.PathLike, dpi: int = 120) -> None:
    """Lay out the matplotlib figure ``fig``, write it as a PNG to ``dest`` atomically
    (:func:`atomic_path`) and close it (also when the write fails): the one way every report
    saves a figure."""
    import matplotlib.pyplot as plt

    try:
        fig.tight_layout()
        with atomic_path(dest, suffix=".png") as tmp:
            fig.savefig(tmp, format="png", dpi=dpi)
    finally:
        plt.close(fig)
