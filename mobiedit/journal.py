"""Edit journal: every applied rank-one edit, replayable and undoable bit-exactly.

A journal is a folder holding

* ``journal.jsonl`` — one JSON object per edit (:class:`JournalEntry`; the entry format and its
  validation are :mod:`mobiedit.journal_entry`), rewritten whole through
  :func:`~mobiedit.atomic.atomic_write_text` on every change, so a crash leaves either the old or
  the new journal and never a torn line (a torn or malformed line can only come from outside
  damage and is reported, never skipped);
* ``edit-NNNNNN.safetensors`` — the edit's rank-one factors ``u`` [d_out] and ``w`` [d_in]
  (float32); the entry holds the file's sha256;
* ``base.safetensors`` — the pre-edit weight of every module the journal has touched, keyed by
  module name, stored in the module's dtype the first time that module is edited, never changed.

Order of writes in :meth:`Journal.record`: base (first edit of a module), factors file, then the
journal. A crash before the journal write leaves an orphan file that nothing references (the
next record overwrites it).

Math (docs/zo_spec.md §5): ``W_new = W + u w^T`` for ``[out, in]`` weights, ``W + w u^T`` for
GPT-2's ``Conv1D`` ``[in, out]``; :func:`~mobiedit.editing.update.apply_factors` computes it in float32 and casts back to
the weight's dtype. A module's weight with edits e1..en active is defined as
``apply_factors(...apply_factors(base, e1)..., en)`` in id order; :meth:`Journal.undo` and
:meth:`Journal.bake` recompute exactly that from ``base.safetensors``, so the result is
bit-identical to never having applied the undone edit. Callers that apply an edit themselves must
use :func:`apply_factors` (or :meth:`Journal.bake`) to stay bit-identical.

``edit --out DIR`` semantics (:func:`mobiedit.api.edit`): the edit session writes each applied
edit with :func:`~mobiedit.editing.update.apply_factors` onto the weight the journal replays to
(so every touched module = base + active edits, bit-identical to :meth:`Journal.bake`), saves the
model into DIR with the journal in ``DIR/journal``. A model loaded from DIR therefore already holds its edits: :meth:`Journal.apply_all` refuses it
(it needs base weights), while :meth:`Journal.undo` and :meth:`Journal.bake` work because they
start from ``base.safetensors``. One writer per journal at a time: writers hold
:func:`mobiedit.journal_lock.journal_lock` (the folder's ``.lock``, which :meth:`Journal.open` ignores).
"""
from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Collection
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load as st_load
from safetensors.torch import save as st_save

from .atomic import atomic_dir, atomic_write_bytes, atomic_write_text, recover_dir, remove_stale_temps
from .editing.update import apply_factors  # noqa: F401  (the write's arithmetic; re-exported for callers)
from .errors import JournalError, NumericalError, one_line
from .families import Family
from .journal_entry import (RESTORE, JournalEntry, entry_from_json, record_args,
                            factors_name, tensor_sha256)  # (JournalEntry, factors_name, tensor_sha256 re-exported)
from .journal_lock import LOCK_FILE
from .jsonio import JSONProblem, loads_strict
from .requests import EditRequest

log = logging.getLogger(__name__)

JOURNAL_FILE = "journal.jsonl"
BASE_FILE = "base.safetensors"


class Journal:
    """An edit journal folder. Build with :meth:`open`; entries are kept in memory and on disk."""

    def __init__(self, folder: Path, entries: list[JournalEntry]) -> None:
        self.folder = folder
        self._entries = entries

    # ------------------------------------------------------------------ reading
    @classmethod
    def open(cls, folder: str | os.PathLike, readonly: bool = False) -> "Journal":
        """Open (or create, if missing or empty) a journal folder, validating every line and the
        sha256 of every factors file. Raises JournalError naming the line / edit and field.

        ``readonly``: a reader's open — nothing is created, recovered or cleaned up on disk (a
        missing journal is an empty one); the returned journal must not be written."""
        folder = Path(folder)
        path = folder / JOURNAL_FILE
        if not folder.exists() and not readonly:
            recover_dir(folder)  # a crash inside atomic_dir's non-atomic fallback left it aside
        if folder.is_dir() and not readonly:
            remove_stale_temps(folder)  # temporaries of writers killed mid-write (never read)
        if not path.exists():
            if folder.exists() and (not folder.is_dir() or any(p.name != LOCK_FILE for p in folder.iterdir())):
                raise JournalError(f"no {JOURNAL_FILE} in a non-empty folder", where=str(folder),
                                   fix="pass a journal folder, or a new/empty folder to start one")
            if not readonly:
                atomic_write_text(path, "")
            return cls(folder, [])
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise JournalError(f"cannot read ({one_line(e)})", where=str(path), fix="check permissions") from None
        journal = cls(folder, cls._parse(text, path))
        for entry in journal._entries:
            journal._factors_bytes(entry)
        return journal

    @staticmethod
    def _parse(text: str, path: Path) -> list[JournalEntry]:
        """Entries of a journal text; ids strictly increase and a module's rows agree."""
        lines = text.split("\n")
        if lines[-1] != "":
            raise JournalError("last line has no newline (torn or hand-edited)",
                               where=f"{path}, line {len(lines)}", fix=RESTORE)
        entries: list[JournalEntry] = []
        for n, line in enumerate(lines[:-1], 1):
            try:
                obj = loads_strict(line)
            except JSONProblem as e:  # malformed, duplicate key, too many digits, too deep
                raise JournalError(f"malformed JSON ({e})", where=f"{path}, line {n}",
                                   fix=RESTORE) from None
            entry = entry_from_json(obj, f"{path}, line {n}")
            if entries and entry.id <= entries[-1].id:
                raise JournalError(f"id {entry.id} does not follow {entries[-1].id}",
                                   where=f"{path}, line {n}, field 'id'", fix="ids must strictly increase")
            first = next((e for e in entries if e.module == entry.module), entry)
            for name in ("family", "weight_out_in", "d_out", "d_in", "base_sha256"):
                if getattr(first, name) != getattr(entry, name):
                    raise JournalError(f"differs from edit {first.id} on the same module",
                                       where=f"{path}, line {n} (edit {entry.id}), field '{name}'",
                                       fix=RESTORE)
            entries.append(entry)
        return entries

    def entries(self, active_only: bool = False) -> list[JournalEntry]:
        """All entries in id order (only status "applied" ones if ``active_only``)."""
        return [e for e in self._entries if e.active or not active_only]

    def entry(self, edit_id: int) -> JournalEntry:
        """The entry with ``edit_id``; JournalError if there is none."""
        for e in self._entries:
            if e.id == edit_id:
                return e
        ids = [e.id for e in self._entries]
        raise JournalError(f"no edit {edit_id!r}" + ("" if ids else " (the journal has no edits)"),
                           where=str(self.folder / JOURNAL_FILE),
                           fix=f"use one of the ids {ids}" if ids else "edit first; there is nothing to undo")

    def _factors_bytes(self, entry: JournalEntry) -> bytes:
        path = self.folder / entry.factors
        where = f"{self.folder / JOURNAL_FILE}, edit {entry.id}"
        try:
            data = path.read_bytes()
        except OSError as e:
            raise JournalError(f"factors file unreadable ({one_line(e.strerror or e)})",
                               where=f"{where}, field 'factors'", fix=RESTORE) from None
        if hashlib.sha256(data).hexdigest() != entry.sha256:
            raise JournalError(f"sha256 of {entry.factors} does not match the journal (tampered or corrupt)",
                               where=f"{where}, field 'sha256'", fix=RESTORE)
        return data

    def _factors(self, entry: JournalEntry, where: str) -> dict[str, torch.Tensor]:
        """The tensors of ``entry``'s factors file (sha256 checked); JournalError naming ``where``."""
        data = self._factors_bytes(entry)
        try:
            return st_load(data)
        except Exception as e:  # safetensors raises its own error types for malformed headers
            raise JournalError(f"factors file is not valid safetensors ({one_line(e)})",
                               where=f"{where}, field 'factors'", fix=RESTORE) from None

    def load_factors(self, entry: JournalEntry) -> tuple[torch.Tensor, torch.Tensor]:
        """(u, w) of ``entry``, after checking the sha256 and the shapes [d_out] / [d_in]."""
        where = f"{self.folder / JOURNAL_FILE}, edit {entry.id}"
        tensors = self._factors(entry, where)
        for key, size in (("u", entry.d_out), ("w", entry.d_in)):
            t = tensors.get(key)
            if t is None or t.dtype != torch.float32 or tuple(t.shape) != (size,):
                got = None if t is None else f"{t.dtype}{list(t.shape)}"
                raise JournalError(f"factor '{key}' is {got}, expected float32[{size}]",
                                   where=f"{where}, field '{key}'", fix=RESTORE)
            if not torch.isfinite(t).all():
                raise JournalError(f"factor '{key}' contains NaN/Inf", where=f"{where}, field '{key}'",
                                   fix=RESTORE)
        return tensors["u"], tensors["w"]

    def load_key(self, entry: JournalEntry) -> torch.Tensor | None:
        """The key ``k`` [d_in] recorded with ``entry`` (:meth:`record`'s ``key``), after checking the
        sha256, dtype, shape and values; None when the entry was recorded without one."""
        where = f"{self.folder / JOURNAL_FILE}, edit {entry.id}"
        t = self._factors(entry, where).get("k")
        if t is None:
            return None
        if t.dtype != torch.float32 or tuple(t.shape) != (entry.d_in,) or not torch.isfinite(t).all():
            raise JournalError(f"key 'k' is {t.dtype}{list(t.shape)} or non-finite, expected finite float32[{entry.d_in}]",
                               where=f"{where}, field 'k'", fix=RESTORE)
        return t

    def base_weight(self, module: str) -> torch.Tensor:
        """The stored pre-edit weight of ``module``, checked against the journal's base_sha256."""
        rows = [e for e in self._entries if e.module == module]
        if not rows:
            raise JournalError(f"module {module!r} has no edits", where=str(self.folder),
                               fix="name a module listed in entries()")
        path = self.folder / BASE_FILE
        try:
            with safe_open(str(path), framework="pt") as fh:
                base = fh.get_tensor(module)
        except Exception as e:  # missing file / key or malformed header
            raise JournalError(f"cannot read base weight of {module!r} ({one_line(e)})", where=str(path),
                               fix=RESTORE) from None
        if tensor_sha256(base) != rows[0].base_sha256:
            raise JournalError(f"base weight of {module!r} does not match the journal",
                               where=f"{path}, edit {rows[0].id}, field 'base_sha256'", fix=RESTORE)
        if base.is_floating_point() and not torch.isfinite(base).all():
            raise JournalError(f"base weight of {module!r} contains NaN/Inf", where=f"{path}, key {module!r}",
                               fix=RESTORE)
        return base

    def rebuild(self, module: str, skip: int | None = None, only: Collection[int] | None = None) -> torch.Tensor:
        """Base weight of ``module`` with its active edits (except ``skip``; of ``only``'s ids when
        given) applied in id order."""
        weight = self.base_weight(module)
        for e in self._entries:
            if e.module == module and e.active and e.id != skip and (only is None or e.id in only):
                u, w = self.load_factors(e)
                try:
                    weight = apply_factors(weight, u, w, e.weight_out_in)
                except (JournalError, NumericalError) as err:  # shape / overflow: corrupt journal
                    raise JournalError(err.message, where=f"{self.folder / JOURNAL_FILE}, edit {e.id}, "
                                       "field 'factors'", fix=RESTORE) from None
        return weight

    # ------------------------------------------------------------------ writing
    def _write(self, entries: list[JournalEntry]) -> None:
        text = "".join(json.dumps(asdict(e), sort_keys=True, ensure_ascii=False) + "\n" for e in entries)
        atomic_write_text(self.folder / JOURNAL_FILE, text)
        self._entries = entries

    def rewind(self, n: int) -> None:
        """Keep the first ``n`` entries, every one marked applied: the journal as it stood after its
        ``n``-th record, for a writer whose only undos come after its last record (a sequential row
        resumed from its saved state, :mod:`mobiedit.sequential_resume`). The model is not touched;
        factors files of dropped entries are left behind (orphans, as :meth:`copy_to` leaves)."""
        if not 0 <= n <= len(self._entries):
            raise JournalError(f"cannot rewind to {n} entries: the journal holds {len(self._entries)}",
                               where=str(self.folder / JOURNAL_FILE), fix=RESTORE)
        self._write([replace(e, status="applied") for e in self._entries[:n]])

    def _store_base(self, module: str, base: torch.Tensor) -> None:
        """Add ``module``'s base weight to base.safetensors (atomic rewrite keeping other keys)."""
        path = self.folder / BASE_FILE
        tensors: dict[str, torch.Tensor] = {}
        if path.exists():
            try:
                with safe_open(str(path), framework="pt") as fh:
                    tensors = {k: fh.get_tensor(k) for k in fh.keys()}
            except Exception as e:  # malformed header / unreadable
                raise JournalError(f"cannot read ({one_line(e)})", where=str(path), fix=RESTORE) from None
        tensors[module] = base.detach().cpu().contiguous().clone()
        atomic_write_bytes(path, st_save(tensors, metadata={"format": "mobiedit-journal-base"}))

    def record(self, request: EditRequest | dict, method: str, family: Family | str, layer: int,
               module_name: str, u: torch.Tensor, w: torch.Tensor, base_weight: torch.Tensor,
               metrics: dict | None = None, config: dict | None = None, key: torch.Tensor | None = None
               ) -> JournalEntry:
        """Record one edit whose factors were computed on ``base_weight`` (the module's weight just
        before this edit). Writes base (first edit of the module), factors, then the journal line.
        ``key`` [d_in] (optional): the edit's key, kept in the factors file as ``k`` (a bundle's
        protecting write rules hold the active edits' keys still, :meth:`load_key`).

        The model is not changed: apply with :func:`apply_factors` or :meth:`bake`. Raises
        JournalError for inconsistent shapes / arguments, NumericalError for non-finite factors.
        """
        fam, d_out, d_in, factors, extras = record_args(request, method, family, layer, module_name, u, w,
                                                        base_weight, metrics, config, key)
        apply_factors(base_weight, factors["u"], factors["w"], fam.weight_out_in)  # NumericalError on overflow
        prior = [e for e in self._entries if e.module == module_name]
        if prior:
            p = prior[0]
            base_sha = p.base_sha256
            if (p.family, p.weight_out_in, p.d_out, p.d_in) != (fam.name, fam.weight_out_in, d_out, d_in):
                raise JournalError(f"module {module_name!r} was edited as {p.family} [{p.d_out}x{p.d_in}]",
                                   where="record(), argument 'base_weight'", fix="use the same model")
            if not torch.equal(self.rebuild(module_name).to(base_weight.device), base_weight.detach()):
                raise JournalError(f"{module_name} does not hold this journal's base weight + its active edits: "
                                   "the journal belongs to another model (or the weight was changed outside it)",
                                   where=f"{self.folder / JOURNAL_FILE}, edit {p.id}, field 'base_sha256'",
                                   fix="edit with the journal written for this model, or start a new journal "
                                       "(remove the folder's journal/)")
        else:
            base_sha = tensor_sha256(base_weight)
            self._store_base(module_name, base_weight)
        edit_id = self._entries[-1].id + 1 if self._entries else 1
        blob = st_save(factors, metadata={"edit_id": str(edit_id), "module": module_name})
        atomic_write_bytes(self.folder / factors_name(edit_id), blob)
        entry = JournalEntry(
            id=edit_id, method=method, module=module_name, layer=layer, family=fam.name,
            weight_out_in=fam.weight_out_in, d_out=d_out, d_in=d_in, factors=factors_name(edit_id),
            sha256=hashlib.sha256(blob).hexdigest(), base_sha256=base_sha, status="applied",
            timestamp=datetime.now(timezone.utc).isoformat(), **extras)
        self._write(self._entries + [entry])
        log.info("journal %s: recorded edit %d on %s", self.folder, edit_id, module_name)
        return entry

    # ------------------------------------------------------------------ model updates
    def _check_module(self, model: torch.nn.Module, family: Family, entry: JournalEntry) -> None:
        """Check that ``model`` has the module ``entry`` edits, in its family, layout and shape."""
        where, fix = f"{self.folder / JOURNAL_FILE}, edit {entry.id}", "use the model the journal belongs to"
        if (entry.family, entry.weight_out_in) != (family.name, family.weight_out_in):
            raise JournalError(f"edit was made on family {entry.family!r}, model is {family.name!r}",
                               where=f"{where}, field 'family'", fix=fix)
        try:
            shape = tuple(model.get_submodule(entry.module).weight.shape)
        except AttributeError:
            raise JournalError(f"model has no module {entry.module!r} with a weight",
                               where=f"{where}, field 'module'", fix=fix) from None
        want = (entry.d_out, entry.d_in) if entry.weight_out_in else (entry.d_in, entry.d_out)
        if shape != want:
            raise JournalError(f"module weight is {list(shape)}, edit expects {list(want)}",
                               where=f"{where}, field 'module'", fix=fix)

    @staticmethod
    def _set(model: torch.nn.Module, new: dict[str, torch.Tensor]) -> None:
        """Copy rebuilt weights into the model (all checks already done)."""
        with torch.no_grad():
            for module, tensor in new.items():
                weight = model.get_submodule(module).weight
                weight.copy_(tensor.to(device=weight.device, dtype=weight.dtype))

    def _rebuild_all(self, model: torch.nn.Module, family: Family) -> dict[str, torch.Tensor]:
        """Every touched module rebuilt (base + active edits), after checking the model."""
        modules: dict[str, torch.Tensor] = {}
        for e in self._entries:
            self._check_module(model, family, e)
            if e.module not in modules:
                modules[e.module] = self.rebuild(e.module)
        return modules

    def apply_all(self, model: torch.nn.Module, family: Family) -> list[int]:
        """Apply the active edits in id order to a model that holds the BASE weights.

        Raises JournalError, changing nothing, if any touched module differs from its stored base
        weight (already edited, baked, or another checkpoint). Returns the applied ids.
        """
        new = self._rebuild_all(model, family)
        for module in new:
            if not torch.equal(model.get_submodule(module).weight.detach().cpu(), self.base_weight(module)):
                raise JournalError(f"module {module!r} does not hold the journal's base weight",
                                   where=str(self.folder), fix="load the original model; for a model saved "
                                   "with edits baked in use bake()/undo() instead of apply_all()")
        self._set(model, new)
        return [e.id for e in self.entries(active_only=True)]

    def bake(self, model: torch.nn.Module, family: Family) -> list[str]:
        """Set every touched module to base + active edits (any current state; idempotent).
        Returns the module names written. See the module docstring for ``edit --out``."""
        new = self._rebuild_all(model, family)
        self._set(model, new)
        return list(new)

    def undo(self, edit_id: int, model: torch.nn.Module, family: Family) -> JournalEntry:
        """Mark ``edit_id`` undone and set its module to base + the remaining active edits, bit-exactly
        as if it had never been applied. Other modules are untouched. The journal is written before
        the model changes; on any error neither changes."""
        entry = self.entry(edit_id)
        if not entry.active:
            raise JournalError(f"edit {edit_id} is already undone", where=str(self.folder / JOURNAL_FILE),
                               fix="list active edits with entries(active_only=True)")
        self._check_module(model, family, entry)
        weight = self.rebuild(entry.module, skip=edit_id)
        undone = replace(entry, status="undone")
        self._write([undone if e.id == edit_id else e for e in self._entries])
        self._set(model, {entry.module: weight})
        log.info("journal %s: undid edit %d on %s", self.folder, edit_id, entry.module)
        return undone

    def copy_to(self, dest: str | os.PathLike) -> Path:
        """Atomically copy the journal (lines, base, referenced factors) to ``dest`` after re-checking
        every factors file; orphan files are left behind. Returns ``dest``."""
        for e in self._entries:
            self._factors_bytes(e)
        with atomic_dir(dest) as tmp:
            names = [e.factors for e in self._entries] + ([BASE_FILE] if self._entries else [])
            for name in [JOURNAL_FILE] + names:
                shutil.copyfile(self.folder / name, tmp / name)
        return Path(dest)
