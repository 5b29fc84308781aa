"""Where commands may write: the ``--out`` policy, up-front writability / free-space checks, and
``OSError`` → a named error.

``mobiedit edit``, ``quantize`` and ``export`` replace their ``--out`` folder atomically
(:func:`~mobiedit.atomic.atomic_dir`): whatever was there is deleted. :func:`check_output_dir` is the
one gate all three pass before any long work:

* ``--out`` a symbolic link, or an existing file → refused;
* ``--out`` equal to, or a parent of, any input (model folder, request file, config, bundle) →
  refused, with or without ``--overwrite``;
* a bundle whose edit journal holds records is not replaced without ``overwrite`` (its edits were
  made in place after the export and exist nowhere else);
* a non-empty folder is replaced only when it is a previous output of the *same* command — it holds
  the marker :data:`MARKER` (``{"kind": "edit" | "quantize" | "bundle"}``, written by
  :func:`mark_output` into every output), or, for folders written before the marker existed, the
  command's own signature (``journal/journal.jsonl`` + ``config.json``; the quantize sidecar; a
  ``manifest.json`` created by mobiedit) — or when ``overwrite`` is set;
* the nearest existing parent must be writable (probed with a real temporary file, so read-only
  mounts are caught too) and hold at least ``need_bytes`` free.

:func:`named_os_error` turns an ``OSError`` into a :class:`~mobiedit.errors.FileSystemError` naming
the path and the fix; the CLI applies it to any ``OSError`` that reaches it.
"""
from __future__ import annotations

import errno
import json
import os
import tempfile
from pathlib import Path
from typing import Iterable

from .errors import ConfigError, FileSystemError

MARKER = ".mobiedit-output.json"
KINDS = ("edit", "quantize", "bundle")
_COMMAND = {"edit": "mobiedit edit", "quantize": "mobiedit quantize", "bundle": "mobiedit export"}

_FIXES = {
    errno.EACCES: "make the folder writable for this user, or choose another location",
    errno.EPERM: "make the folder writable for this user, or choose another location",
    errno.EROFS: "the file system is mounted read-only: choose a location on a writable disk",
    errno.ENOSPC: "free space on that disk, or write to another disk (nothing was changed)",
    errno.EDQUOT: "the disk quota is exhausted: free space, or write elsewhere (nothing was changed)",
    errno.EISDIR: "pass a file path, not a folder",
    errno.ENOTDIR: "a component of the path is a file, not a folder: fix the path",
    errno.ENOENT: "check the path",
    errno.ELOOP: "the path has too many symbolic links: pass the real path",
    errno.ENAMETOOLONG: "use a shorter path",
    errno.EEXIST: "remove the existing file or choose another path",
}


def named_os_error(err: OSError, what: str | None = None) -> FileSystemError:
    """A :class:`FileSystemError` for ``err``: ``where`` is the path, the message the OS's reason,
    the fix chosen by ``errno``. ``what`` (e.g. ``"writing the bundle"``) prefixes the message."""
    path = err.filename if err.filename is not None else what or "file system"
    reason = err.strerror or type(err).__name__
    if err.filename2 is not None:
        reason += f" (and {err.filename2})"
    msg = f"{what}: {reason}" if what and err.filename is not None else reason
    return FileSystemError(msg, where=str(path), fix=_FIXES.get(err.errno, "check the path and its permissions"))


def _read_marker(folder: Path) -> str | None:
    p = folder / MARKER
    try:
        if not p.is_file() or p.stat().st_size > 4096:
            return None
        kind = json.loads(p.read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError, RecursionError):
        return None
    return kind if kind in KINDS else None


def output_kind(folder: str | os.PathLike) -> str | None:
    """Which command wrote ``folder`` (``"edit"`` / ``"quantize"`` / ``"bundle"``), or None."""
    folder = Path(folder)
    kind = _read_marker(folder)
    if kind is not None:
        return kind
    if (folder / "journal" / "journal.jsonl").is_file() and (folder / "config.json").is_file():
        return "edit"
    if (folder / "mobiedit-quant.json").is_file() and (folder / "config.json").is_file():
        return "quantize"
    man = folder / "manifest.json"
    try:
        if man.is_file() and man.stat().st_size < (16 << 20):
            created = json.loads(man.read_text(encoding="utf-8")).get("created_by", "")
            if isinstance(created, str) and created.startswith("mobiedit"):
                return "bundle"
    except (OSError, ValueError, AttributeError, RecursionError):
        pass
    return None


def mark_output(folder: str | os.PathLike, kind: str) -> None:
    """Write :data:`MARKER` into ``folder`` (the temporary output folder, before its swap)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    (Path(folder) / MARKER).write_text(json.dumps({"kind": kind, "written_by": _COMMAND[kind]}) + "\n")


def _existing_ancestor(path: Path) -> Path:
    p = path
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def check_writable(folder: str | os.PathLike, flag: str, need_bytes: int = 0) -> None:
    """Refuse, before any long work, a destination whose folder (or nearest existing ancestor)
    cannot be written or has less than ``need_bytes`` free. ``flag`` names the option in errors."""
    base = _existing_ancestor(Path(os.path.abspath(folder)))
    if not base.is_dir():
        raise FileSystemError("is not a folder", where=f"{flag}: {base}",
                              fix="a component of the path is a file: fix the path")
    try:
        fd, probe = tempfile.mkstemp(prefix=".mobiedit-write-probe-", dir=base)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        err = named_os_error(e)
        raise FileSystemError(f"cannot write here ({e.strerror or type(e).__name__})", where=f"{flag}: {base}",
                              fix=err.fix) from None
    if need_bytes > 0:
        st = os.statvfs(base)
        free = st.f_bavail * st.f_frsize
        if free < need_bytes:
            raise FileSystemError(f"needs about {need_bytes / 1e6:.1f} MB, only {free / 1e6:.1f} MB are free",
                                  where=f"{flag}: {base}",
                                  fix="free space on that disk, or write to another disk (nothing was changed)")


def check_output_dir(out: str | os.PathLike, kind: str, inputs: Iterable[str | os.PathLike | None] = (),
                     overwrite: bool = False, flag: str = "--out", need_bytes: int = 0) -> Path:
    """The ``--out`` gate of ``edit`` / ``quantize`` / ``export`` (see the module docstring).

    ``inputs``: every path the command reads (None entries are skipped). Returns ``out`` as a Path.
    Raises ConfigError (policy) or FileSystemError (not writable / not enough space).
    """
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}")
    out = Path(out)
    where = f"{flag} {out}"
    if os.path.islink(out):
        raise ConfigError("is a symbolic link", where=where,
                          fix="pass the real folder (the output folder is replaced, never written through a link)")
    if out.exists() and not out.is_dir():
        raise ConfigError("exists and is a file, not a folder", where=where,
                          fix="pass a new or empty folder (the file is left alone)")
    res = out.resolve()
    for inp in inputs:
        if inp is None:
            continue
        ip = Path(inp).resolve()
        if res == ip or res in ip.parents:
            rel = "is" if res == ip else "contains"
            raise ConfigError(f"{rel} the input {inp}: writing it would delete the input", where=where,
                              fix="write to a new folder outside every input")
    if out.is_dir():
        try:
            non_empty = any(out.iterdir())
        except OSError as e:
            raise named_os_error(e, "reading the output folder") from None
        found = output_kind(out) if non_empty else kind
        if non_empty and found != kind and not overwrite:
            what = f"a `{_COMMAND[found]}` output" if found else "not written by mobiedit"
            raise ConfigError(f"folder is not empty and is {what}; it would be replaced", where=where,
                              fix="choose a new or empty folder, or pass --overwrite to replace it "
                                  "(everything in it is deleted)")
        if non_empty and found == "bundle" and kind == "bundle" and not overwrite and _journaled(out):
            raise ConfigError("is a bundle whose journal holds edits (made with `edit --bundle` or the app, "
                              "kept nowhere else); a new export would delete them", where=where,
                              fix="export to a new folder, or pass --overwrite to replace it and lose those edits")
    check_writable(out.parent, flag, need_bytes)
    return out


def _journaled(bundle: Path) -> bool:
    """Whether ``bundle``'s edit journal has any record (a bundle is edited in place after export,
    so its journal is the only copy of those edits)."""
    try:
        with open(bundle / "journal" / "journal.jsonl", "rb") as f:
            return any(line.strip() for line in f)
    except OSError:
        return False


def weights_bytes(model_dir: str | os.PathLike) -> int:
    """Total size of the ``*.safetensors`` files of a model folder (0 when unreadable)."""
    try:
        return sum(p.stat().st_size for p in Path(model_dir).glob("*.safetensors") if p.is_file())
    except OSError:
        return 0


def check_output_file(path: str | os.PathLike | None, flag: str) -> None:
    """Up-front check of a single output file (e.g. ``eval --json``): not a folder, not a link to
    one, and its folder writable."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise ConfigError("is a folder", where=f"{flag} {p}", fix="pass a file path, e.g. scores.json")
    if os.path.islink(p):
        raise ConfigError("is a symbolic link", where=f"{flag} {p}",
                          fix="pass the real path (the file is replaced, never written through a link)")
    check_writable(p.parent, flag)
