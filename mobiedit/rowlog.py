"""A benchmark row's per-request log: one JSON line per finished request, appended and fsynced as
each edit finishes, so that an interrupted run (a real model's row takes hours) resumes where it
stopped; a line cut short by a kill is ignored. Used by ``mobiedit bench`` and the export quality
bench (``python -m mobiedit.export.quality``).

The first line records the row's identity (its config, model, request file, layer, seed): resuming
a log under another identity is refused — its results would be mixed with another experiment's.
A config field added to the code after the log was written is not a difference when the row uses
that field's default (``defaults``): the default is what the older code did.
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
from pathlib import Path
from typing import Any, Iterable

from .atomic import atomic_write_text
from .errors import ConfigError
from .evaluate import RequestScores, aggregate


def same_identity(old: Any, new: Any, defaults: Any) -> bool:
    """``old == new``, except that a key only ``new`` has is accepted where ``defaults`` (a tree of
    the same shape) holds the same value for it: a field added since ``old`` was recorded, at the
    default that stands for the older code's behaviour."""
    if not (isinstance(old, dict) and isinstance(new, dict)):
        return old == new
    defaults = defaults if isinstance(defaults, dict) else {}
    for key in set(old) | set(new):
        if key not in new:
            return False
        if key not in old:
            if key not in defaults or defaults[key] != new[key]:
                return False
        elif not same_identity(old[key], new[key], defaults.get(key)):
            return False
    return True


class RowLog:
    """``done`` maps case_id -> record (``scores`` a :class:`RequestScores`, plus the fields given
    to :meth:`add`)."""

    def __init__(self, path: Path, identity: dict[str, Any] | None = None,
                 defaults: dict[str, Any] | None = None) -> None:
        self.path, self.done = Path(path), {}
        ident = None
        if self.path.is_file():
            text = self.path.read_text()
            if text and not text.endswith("\n"):  # drop the torn tail so that appends start on a new line
                text = text[: text.rfind("\n") + 1]
                atomic_write_text(self.path, text)
            for line in text.splitlines():
                try:
                    rec = json.loads(line)
                    if "identity" in rec:
                        ident = rec["identity"]
                        continue
                    rec["scores"] = RequestScores(**rec["scores"])
                except (ValueError, TypeError, KeyError):
                    continue  # the line a kill cut short
                self.done[rec["case_id"]] = rec
        if identity is not None:
            want = json.loads(json.dumps(identity))
            if ident is not None and not same_identity(ident, want, json.loads(json.dumps(defaults or {}))):
                changed = sorted(k for k in set(ident) | set(want) if ident.get(k) != want.get(k))
                raise ConfigError(f"{self.path.name} holds results of another run (different {', '.join(changed)})",
                                  where=str(self.path),
                                  fix="pass another --out, or delete the file to start this row over")
            if ident is None:
                self._append({"identity": want})

    def _append(self, rec: dict) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps(rec) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def add(self, case_id: str, scores: RequestScores, **fields: Any) -> None:
        """Record one finished request (``fields``: JSON-ready values, e.g. succeeded, loss_evals, wall_s)."""
        rec = {"case_id": case_id, "scores": dataclasses.asdict(scores), **fields}
        self._append(rec)
        self.done[case_id] = rec | {"scores": scores}

    def records(self, case_ids: Iterable[str]) -> list[dict]:
        """The done records of ``case_ids``, in that order (missing ones skipped)."""
        return [self.done[c] for c in case_ids if c in self.done]

    def summary(self, name: str, case_ids: Iterable[str]) -> dict:
        """Row, n, aggregate quality, success rate, median loss evaluations of the successes and
        mean wall time per edit over the done records of ``case_ids``. ``quality_applied``: the
        aggregate over the edits that succeeded alone — the ones a session applies (a failed edit
        is reported and not written unless forced), so what a user's model goes through."""
        recs = self.records(case_ids)
        applied = [r for r in recs if r["succeeded"]]
        ok = [r["loss_evals"] for r in applied]
        return {"row": name, "n": len(recs), "quality": aggregate([r["scores"] for r in recs]),
                "quality_applied": aggregate([r["scores"] for r in applied]) if applied else {"n": 0},
                "success_rate": 100.0 * len(ok) / max(1, len(recs)),
                "loss_evals_median_success": statistics.median(ok) if ok else None,
                "wall_per_edit_s": statistics.mean(r["wall_s"] for r in recs) if recs else float("nan")}
