"""``mobiedit sequential-status WORK``: where the rows of a ``mobiedit sequential --work WORK`` run
stand, read from their resume states alone — no model is loaded and nothing is written, so it is
safe beside the running job. A long real-model row (hundreds of edits, a day of forward-only
search on a CPU) is followed with it: edits done and applied, the latest edits, the checkpoint
table so far, the seconds per edit of the recent edits and the time the rest takes at that rate.

    mobiedit sequential-status runs/seq425-work          # a table per row
    mobiedit sequential-status runs/seq425-work --json   # the same as JSON

Each row's state is ``WORK/ROW/resume.safetensors`` (:mod:`mobiedit.sequential_resume`; only its
JSON metadata is read). The run continues when its own command is run again.
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from .errors import ConfigError

#: the recent edits whose mean wall time sets the rate of the rest
RATE_WINDOW = 20
#: the fix for a state this command cannot read
DAMAGED_FIX = "the row's state is damaged: rerun its `mobiedit sequential` command with a new --work folder"


@dataclass
class RowStatus:
    """One row of a work folder: its settings, progress, recent edits, checkpoints and rate."""

    row: str
    method: str
    model: str
    folder: str
    n: int
    done: int
    applied: int
    checkpoints: list[int]
    rows: list[dict]
    recent: list[dict]
    elapsed_s: float
    rate_s_per_edit: float | None
    remaining_s: float | None
    saved_ago_s: float

    @property
    def finished(self) -> bool:
        return self.done >= self.n


def row_status(folder: Path, now: float | None = None, recent: int = 5) -> RowStatus:
    """The status of the row whose state ``folder`` holds.

    Raises:
        ConfigError: no state in ``folder``, or one that cannot be read (``where="WORK"``).
    """
    from .sequential_resume import STATE_FILE, read_meta

    meta = read_meta(folder, where="WORK", fix=DAMAGED_FIX)
    if meta is None:
        raise ConfigError(f"no {STATE_FILE} in {folder}", where="WORK",
                          fix="pass the --work folder of a `mobiedit sequential` run")
    try:
        return _status(folder, meta, now, recent)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a state not written by save_state
        raise ConfigError(f"the row's resume state {folder / STATE_FILE} lacks or mistypes a field "
                          f"({type(e).__name__}: {e})", where="WORK", fix=DAMAGED_FIX) from None


def _status(folder: Path, meta: dict, now: float | None, recent: int) -> RowStatus:
    from .sequential_resume import STATE_FILE

    ident, records = meta["identity"], meta["records"]
    walls = [float(r["wall_s"]) for r in records[-RATE_WINDOW:]]
    rate = sum(walls) / len(walls) if walls else None
    n, done = int(ident["n"]), int(meta["done"])
    mtime = (folder / STATE_FILE).stat().st_mtime
    return RowStatus(
        row=str(ident["row"]), method=str(ident["method"]), model=str(ident["model"]),
        folder=str(folder), n=n, done=done, applied=sum(1 for r in records if r["applied"]),
        checkpoints=[int(c) for c in ident["checkpoints"]], rows=meta["rows"],
        recent=[{k: r[k] for k in ("edit", "case_id", "applied", "status", "loss_evals", "ladder_tries", "wall_s")}
                for r in records[-recent:]],
        elapsed_s=float(meta["elapsed"]), rate_s_per_edit=rate,
        remaining_s=rate * (n - done) if rate is not None else None,
        saved_ago_s=max(0.0, (time.time() if now is None else now) - mtime))


def work_status(work: Path, now: float | None = None) -> list[RowStatus]:
    """The status of every row under ``work`` (its subfolders holding a resume state), by name.

    Raises:
        ConfigError: ``work`` is not a folder, holds no row state, or a state is unreadable.
    """
    from .sequential_resume import STATE_FILE

    work = Path(work)
    if not work.is_dir():
        raise ConfigError(f"{work} is not a folder", where="WORK",
                          fix="pass the --work folder of a `mobiedit sequential` run")
    folders = sorted(p.parent for p in work.glob(f"*/{STATE_FILE}"))
    if not folders:
        raise ConfigError(f"no row state (ROW/{STATE_FILE}) under {work}", where="WORK",
                          fix="pass the --work folder of a `mobiedit sequential` run that has finished an edit")
    return [row_status(f, now) for f in folders]


def _duration(s: float | None) -> str:
    """``s`` seconds as tqdm writes them (``[H:]MM:SS``); None as ``-``."""
    from tqdm import tqdm

    return "-" if s is None else tqdm.format_interval(s)


def format_status(rows: list[RowStatus]) -> str:
    """A heading, a progress line, the recent edits and the checkpoint table per row."""
    from .sequential_report import cell, table_lines

    out = []
    for r in rows:
        nxt = next((c for c in r.checkpoints if c > r.done), None)
        lines = [f"row {r.row}: {r.method} on {r.model}",
                 f"  {r.done} of {r.n} edits done, {r.applied} applied; "
                 + ("finished: rerun its command for the undo check and the result file" if r.finished else
                    f"next checkpoint at {nxt}; {cell(r.rate_s_per_edit, 0, '.0f')} s/edit over the last "
                    f"{min(RATE_WINDOW, r.done)}, about {_duration(r.remaining_s)} of search left"),
                 f"  {_duration(r.elapsed_s)} of editing so far; state saved {_duration(r.saved_ago_s)} ago "
                 f"({r.folder})",
                 f"  {'edit':>6}  {'case':<30}{'applied':>8}{'evals':>7}{'rungs':>6}{'s':>7}  status"]
        lines += [f"  {str(e['edit']):>6}  {str(e['case_id']):<30}{'yes' if e['applied'] else 'no':>8}"
                  f"{cell(e['loss_evals'], 7, 'd')}{cell(e['ladder_tries'], 6, 'd')}{cell(e['wall_s'], 7, '.0f')}"
                  f"  {e['status']}" for e in r.recent]
        lines += ["  " + line for line in table_lines(r.rows)] if r.rows else ["  no checkpoint yet"]
        out.append("\n".join(lines))
    return "\n\n".join(out)


def cmd_status(args) -> int:
    """Print (or, with ``--json``, write to stdout as JSON) the status of ``args.work``'s rows."""
    rows = work_status(args.work)
    if args.json:
        print(json.dumps([asdict(r) | {"finished": r.finished} for r in rows], indent=1))
    else:
        print(format_status(rows))
    return 0


def register(sub) -> None:
    """Add ``sequential-status`` to the ``mobiedit`` subparsers ``sub``."""
    sp = sub.add_parser("sequential-status", help="where the rows of a `sequential --work` run stand (read-only)",
                        description=__doc__.split("\n\n")[0].replace("``", "`"))
    sp.add_argument("work", type=Path, metavar="WORK", help="the --work folder of a `mobiedit sequential` run")
    sp.add_argument("--json", action="store_true", help="the status as JSON")
    sp.set_defaults(fn=cmd_status)
