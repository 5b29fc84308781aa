"""A sequential row's resume state: a row run with ``--work`` saves, after every edit, what it has
done so far, so a run stopped before its end (a crash, a killed job, a session's time running
out) continues where it stopped when the same command is run again — bit for bit the row an
uninterrupted run makes (``tests/test_sequential_resume.py``).

The state is one file, ``WORK/ROW/resume.safetensors`` (written atomically: temporary file,
fsync, rename; never a pickle): its metadata holds the row's identity, the number of edits done
and of journal entries, the per-edit records, the checkpoint rows and the elapsed seconds (the
applied case ids are the records', the applied factors the rewound journal's); its tensors hold what the model's
weights do not — the keys later null-space solves protect (``ctx.edited_keys``) and the
interference tracker's rows. The weights themselves are the journal's (``WORK/ROW/journal``):
on resume it is rewound to the state's entries (:meth:`~mobiedit.journal.Journal.rewind` drops an
edit journaled after the last save) and applied to the unedited model.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from .errors import ConfigError

log = logging.getLogger(__name__)

STATE_FILE = "resume.safetensors"
STATE_VERSION = 1


@dataclass
class SavedState:
    """A loaded resume state: the edits done, the journal entries they left, the row's records,
    checkpoint rows, edited keys per layer, the tracker's tensors and the elapsed seconds."""

    done: int
    entries: int
    records: list[dict]
    rows: list[dict]
    edited_keys: dict[int, list[torch.Tensor]]
    tracker: dict[str, Any]
    elapsed: float


def _stack(ts: list[torch.Tensor]) -> torch.Tensor | None:
    return torch.stack([t.detach().cpu().contiguous() for t in ts]) if ts else None


def save_state(folder: Path, identity: dict, done: int, entries: int, st, edited_keys: dict[int, list[torch.Tensor]],
               elapsed: float) -> None:
    """Write ``folder/resume.safetensors`` for a row that has done ``done`` edits, leaving
    ``entries`` journal entries (``st``: the row's :class:`~mobiedit.sequential_run.RowState`)."""
    from safetensors.torch import save

    from .atomic import atomic_write_bytes

    tensors: dict[str, torch.Tensor] = {}
    for layer, keys in edited_keys.items():
        if keys:
            tensors[f"edited_keys.{layer}"] = _stack(keys)
    for name in ("w_rows", "keys"):
        stacked = _stack(getattr(st.tracker, name))
        if stacked is not None:
            tensors[f"tracker.{name}"] = stacked
    meta = {"version": STATE_VERSION, "identity": identity, "done": done, "entries": entries,
            "records": st.records, "rows": st.rows, "own_change": st.tracker.own_change, "elapsed": elapsed}
    atomic_write_bytes(folder / STATE_FILE, save(tensors, metadata={"state": json.dumps(meta)}))


#: the fix for an unreadable state, when the reader is the row's own run
NEW_WORK_FIX = "pass a new or empty --work folder (the row then starts from its first edit)"


def _unreadable(path: Path, e: Exception, where: str = "--work", fix: str = NEW_WORK_FIX) -> ConfigError:
    return ConfigError(f"cannot read the row's resume state {path} ({type(e).__name__}: {e})", where=where, fix=fix)


def read_meta(folder: Path, where: str = "--work", fix: str = NEW_WORK_FIX) -> dict | None:
    """The JSON metadata of the state saved in ``folder`` (identity, edits done, records, rows,
    elapsed seconds; not the tensors), or None when there is no state file.

    Raises:
        ConfigError: the file is unreadable or holds no state metadata (``where``, ``fix``: the
            reader's argument and remedy).
    """
    from safetensors import safe_open

    path = folder / STATE_FILE
    if not path.is_file():
        return None
    try:
        with safe_open(str(path), framework="pt") as fh:
            meta = json.loads((fh.metadata() or {})["state"])
        if not isinstance(meta, dict) or meta.get("version") != STATE_VERSION:
            raise ValueError(f"state version {meta.get('version') if isinstance(meta, dict) else None!r}, "
                             f"expected {STATE_VERSION}")
    except Exception as e:  # truncated, not safetensors, no state metadata, another version
        raise _unreadable(path, e, where, fix) from None
    return meta


def load_state(folder: Path, identity: dict) -> SavedState | None:
    """The state saved in ``folder`` for a row of ``identity`` (None: no state file).

    Raises:
        ConfigError: the file is unreadable, or was saved by a row of another identity
            (``where="--work"``: the fix is the run's original arguments or a new folder).
    """
    from safetensors import safe_open

    meta = read_meta(folder)
    if meta is None:
        return None
    path = folder / STATE_FILE
    if meta.get("identity") != json.loads(json.dumps(identity)):
        raise ConfigError(f"{path} was saved by a row of other settings (config, model, requests, edits, "
                          "checkpoints or seed)", where="--work",
                          fix="rerun with the stopped run's arguments to resume it, or pass a new --work folder")
    try:
        with safe_open(str(path), framework="pt") as fh:
            tensors = {k: fh.get_tensor(k) for k in fh.keys()}
    except Exception as e:
        raise _unreadable(path, e) from None
    keys = {int(name.split(".", 1)[1]): list(t.unbind(0)) for name, t in tensors.items()
            if name.startswith("edited_keys.")}
    tracker = {"w_rows": list(tensors["tracker.w_rows"].unbind(0)) if "tracker.w_rows" in tensors else [],
               "keys": list(tensors["tracker.keys"].unbind(0)) if "tracker.keys" in tensors else [],
               "own_change": [float(x) for x in meta["own_change"]]}
    return SavedState(int(meta["done"]), int(meta["entries"]), meta["records"], meta["rows"], keys, tracker,
                      float(meta["elapsed"]))


def restore_row(saved: SavedState, session, journal, st) -> None:
    """Put the model, the session and the row state ``st`` where ``saved`` left them: the journal
    rewound to the saved entries and applied to the (unedited) model, the forward model's copies
    of the edited matrices synced, the protected keys, records, rows and interference tracker
    restored. The row journals applied edits only, so the applied ids are the records' and the
    factors are those of every entry the rewound journal holds."""
    lm = session.lm
    journal.rewind(saved.entries)
    journal.apply_all(lm.model, lm.family)
    for layer in sorted({e.layer for e in journal.entries()}):
        session.sync_forward(layer)
    session.ctx.edited_keys.clear()
    session.ctx.edited_requests.clear()
    for layer, keys in saved.edited_keys.items():  # the journal holds the applied edits in order
        reqs = [e.edit_request() for e in journal.entries() if e.layer == layer]
        if len(reqs) != len(keys):
            raise ConfigError(f"the saved state protects {len(keys)} keys at layer {layer} but the journal "
                              f"holds {len(reqs)} edits of it", where="--work",
                              fix="pass a new --work folder (the saved state does not match its journal)")
        for key, req in zip(keys, reqs):
            session.ctx.protect(layer, key, req)
    st.records[:], st.rows[:] = saved.records, saved.rows
    st.applied_ids.update(r["case_id"] for r in saved.records if r["applied"])
    st.factors.update({e.id: journal.load_factors(e) for e in journal.entries()})
    st.tracker.w_rows[:], st.tracker.keys[:] = saved.tracker["w_rows"], saved.tracker["keys"]
    st.tracker.own_change[:] = saved.tracker["own_change"]
    log.info("resumed after edit %d (%d journal entries)", saved.done, saved.entries)
