"""Refuse a journal that belongs to another model (docs/reliability.md, "Foreign journals").

A journal records, per edited module, the sha256 of the module's pre-edit weight (``base_sha256``)
and stores that weight (``base.safetensors``). A journal copied from another model of the same
shape opens cleanly — its own files agree with each other — but its edits were computed on other
weights: applying its factors, or undoing "back" to its base, would put the other model's weights
in place. These checks compare the journal with the model or bundle it is applied to:

* :func:`check_journal_belongs` — a model folder (``edit --out`` output): every module the
  journal touches must hold exactly the journal's rebuild (base + active edits, bit for bit).
* :func:`check_bundle_journal` — a bundle: every entry's ``base_sha256`` must be the sha256 of the
  bundle's own ``keystats.safetensors`` ``base_weight`` (checksummed by the manifest).
"""
from __future__ import annotations

from pathlib import Path

import torch

from .errors import JournalError
from .families import Family
from .journal import JOURNAL_FILE, Journal

FOREIGN_FIX = "use the journal written for this model / bundle, or start a new journal (remove journal/)"


def check_journal_belongs(journal: Journal, model: torch.nn.Module, family: Family) -> None:
    """Raise JournalError unless every module ``journal`` touches holds base + its active edits.

    The module's family, layout and shape are checked first (a clear error for a different
    architecture); then the weight must equal :meth:`Journal.rebuild` bit for bit.
    """
    seen: set[str] = set()
    for e in journal.entries():
        if e.module in seen:
            continue
        seen.add(e.module)
        journal._check_module(model, family, e)
        weight = model.get_submodule(e.module).weight.detach()
        if not torch.equal(journal.rebuild(e.module).to(weight.device), weight):
            raise JournalError(f"{e.module} does not hold the journal's base weight + its active edits: the "
                               "journal belongs to another model (or the weight was changed outside it)",
                               where=f"{journal.folder / JOURNAL_FILE}, edit {e.id}, field 'base_sha256'",
                               fix=FOREIGN_FIX)


def check_bundle_journal(journal: Journal, base_sha256: str, module: str) -> None:
    """Raise JournalError unless every entry edits ``module`` on the bundle's base weight."""
    for e in journal.entries():
        if e.base_sha256 != base_sha256:
            raise JournalError(f"edit {e.id} was computed on another base weight (base_sha256 "
                               f"{e.base_sha256[:12]}…, the bundle's is {base_sha256[:12]}…): the journal belongs "
                               "to another model or bundle", where=f"{journal.folder / JOURNAL_FILE}, edit {e.id}, "
                               "field 'base_sha256'", fix=FOREIGN_FIX)
        if e.module != module:
            raise JournalError(f"edit {e.id} is on {e.module!r}, the bundle edits {module!r}",
                               where=f"{journal.folder / JOURNAL_FILE}, edit {e.id}, field 'module'", fix=FOREIGN_FIX)


def base_model_of(model: torch.nn.Module, family: Family, journal_dir: Path) -> torch.nn.Module | None:
    """A copy of ``model`` with every edit journaled in ``journal_dir`` undone (the pre-edit
    model), or None without a journal there; a journal of another model is refused first."""
    import copy

    if not (journal_dir / JOURNAL_FILE).is_file():
        return None
    j = Journal.open(journal_dir)
    check_journal_belongs(j, model, family)  # a foreign journal's base is not this model's
    base = copy.deepcopy(model)
    for module in {e.module for e in j.entries()}:
        with torch.no_grad():
            base.get_submodule(module).weight.copy_(j.base_weight(module))
    return base
