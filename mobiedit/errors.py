"""The project's error types.

Every error a user can cause (bad request file, bad config, unreadable model folder, a numerical
fault during an edit) is raised as a :class:`MobiEditError` subclass whose message names *where*
(record / field) and *how to fix it*. The CLI prints ``str(err)`` on one line and exits 2; it never
shows a traceback for these.
"""
from __future__ import annotations


class MobiEditError(Exception):
    """Base class: a one-line, user-facing message.

    Args:
        message: what is wrong.
        where: the record / field / file it concerns (e.g. ``"record 3, field 'subject'"``).
        fix: what the user should do about it.
    """

    def __init__(self, message: str, *, where: str | None = None, fix: str | None = None) -> None:
        self.message = message
        self.where = where
        self.fix = fix
        parts = [f"{where}: {message}" if where else message]
        if fix:
            parts.append(f"fix: {fix}")
        super().__init__(" — ".join(parts))


class RequestError(MobiEditError):
    """An edit-request file or record is malformed."""


class ConfigError(MobiEditError):
    """A configuration value (dataclass / YAML / CLI flag) is invalid."""


class ModelLoadError(MobiEditError):
    """A model folder cannot be loaded (missing files, unknown family, unsafe format)."""


class JournalError(MobiEditError):
    """An edit journal is malformed or inconsistent with the model."""


class BundleError(MobiEditError):
    """A phone bundle is malformed, tampered with, or from a newer format version."""


class NumericalError(MobiEditError):
    """NaN/Inf in losses, deltas or statistics; the model was left untouched."""


class LintError(MobiEditError):
    """An exported program failed the graph lint (:mod:`mobiedit.export.lint`); the message lists the findings."""


class LoweringError(MobiEditError):
    """A program could not be captured or lowered (:mod:`mobiedit.export.lower`)."""


class FileSystemError(MobiEditError):
    """Reading or writing a path failed (permission, read-only file system, full disk, wrong kind
    of file); ``where`` is the path. See :func:`mobiedit.outputs.named_os_error`."""


def one_line(err: BaseException) -> str:
    """A library error's text on one line, at most 300 characters (for a message that quotes it;
    the project's own errors are single-line already)."""
    return " ".join(str(err).split())[:300]
