"""``mobiedit undo DIR ID``: undo one journaled edit of a model folder or of a bundle.

* A bundle (``DIR/manifest.json``): the journal entry is marked undone
  (:func:`mobiedit.export.ops.undo_bundle_edit`, also ``mobiedit bundle-undo``).
* A model folder written by ``mobiedit edit --out`` (``DIR/journal/journal.jsonl``): the folder is
  rewritten through :func:`~mobiedit.atomic.atomic_dir` with the edited module set to the
  journal's base + the remaining active edits (:meth:`Journal.undo`, bit-exact: undoing every
  edit gives back the unedited weights) and the entry marked undone; a crash leaves the old or
  the new folder. Every other file (tokenizer, profile, marker) is copied unchanged, every
  other parameter saved as loaded.

Both hold the journal's write lock (:mod:`mobiedit.journal_lock`) and refuse a journal that
belongs to another model (:mod:`mobiedit.journal_guard`).
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

from .errors import JournalError
from .journal import JOURNAL_FILE, Journal, JournalEntry
from .journal_lock import DEFAULT_TIMEOUT, LOCK_FILE, journal_lock

log = logging.getLogger(__name__)


def is_bundle(path: Path) -> bool:
    return (path / "manifest.json").is_file()


def _copy_non_weights(src: Path, dst: Path) -> None:
    """Every file / folder of ``src`` except the weights and the journal (rewritten separately)."""
    for p in src.iterdir():
        if p.name == "journal" or p.name.endswith(".safetensors") or p.name == "model.safetensors.index.json":
            continue
        if p.is_dir():
            shutil.copytree(p, dst / p.name, ignore=shutil.ignore_patterns(LOCK_FILE))
        elif p.is_file():
            shutil.copy2(p, dst / p.name)


def undo_model_edit(folder: str | Path, edit_id: int, lock_timeout: float = DEFAULT_TIMEOUT) -> JournalEntry:
    """Undo ``edit_id`` in the model folder ``folder`` (see the module docstring); returns the
    undone entry. JournalError for an unknown / already undone id or a foreign journal."""
    import torch

    from .atomic import atomic_dir
    from .journal_guard import check_journal_belongs
    from .models import load_model
    from .outputs import check_writable, weights_bytes

    folder = Path(folder)
    jdir = folder / "journal"
    if not (jdir / JOURNAL_FILE).is_file():
        raise JournalError(f"no journal/{JOURNAL_FILE}", where=str(folder),
                           fix="pass a folder written by `mobiedit edit --out`, or a bundle")
    with journal_lock(jdir, lock_timeout):
        journal = Journal.open(jdir)
        entry = journal.entry(edit_id)
        if not entry.active:
            raise JournalError(f"edit {edit_id} is already undone", where=str(jdir / JOURNAL_FILE),
                               fix=f"active edits: {[e.id for e in journal.entries(active_only=True)]}")
        check_writable(folder.parent, "DIR", weights_bytes(folder))
        torch.set_num_threads(1)
        lm = load_model(folder)
        check_journal_belongs(journal, lm.model, lm.family)
        with atomic_dir(folder) as tmp:
            _copy_non_weights(folder, tmp)
            journal.copy_to(tmp / "journal")
            undone = Journal.open(tmp / "journal").undo(edit_id, lm.model, lm.family)
            lm.model.save_pretrained(tmp, safe_serialization=True)
    log.info("undid edit %d of %s", edit_id, folder)
    return undone


def undo_edit(path: str | Path, edit_id: int, lock_timeout: float = DEFAULT_TIMEOUT) -> JournalEntry:
    """Undo ``edit_id`` in a bundle or a model folder (chosen by what ``path`` holds)."""
    path = Path(path)
    if not path.is_dir():
        raise JournalError("no such folder", where=str(path), fix="pass a bundle or a folder written by `mobiedit edit`")
    if is_bundle(path):
        from .export.ops import undo_bundle_edit

        return undo_bundle_edit(path, edit_id, lock_timeout)
    return undo_model_edit(path, edit_id, lock_timeout)
