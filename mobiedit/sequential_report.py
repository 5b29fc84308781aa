"""``mobiedit sequential``'s outputs: the printed tables and the result file.

The result file (``DIR/sequential.json``, or the ``--out`` path itself when it ends in ``.json``)
holds one entry per row: its ``identity`` (what its result depends on: config, model, requests,
edits, checkpoints, seed, ...), the checkpoint table, the per-edit records, the undo check and the
wall seconds. It is rewritten atomically after every row, so an interrupted run keeps the rows it
finished; a rerun reuses a saved row whose identity is unchanged.
"""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from .errors import ConfigError

RESULT_FILE = "sequential.json"
FIGURE_FILE = "sequential.png"
FORMAT = "mobiedit-sequential"

#: checkpoint table: (key, label, width, format)
COLUMNS = (("edits", "edits", 6, "d"), ("applied", "applied", 8, "d"),
           ("efficacy_acc", "eff acc", 8, ".1f"), ("efficacy_prob", "eff prob", 9, ".1f"),
           ("retention_applied_acc", "ret acc*", 9, ".1f"), ("generalization_acc", "gen acc", 8, ".1f"),
           ("locality_acc", "loc acc", 8, ".1f"), ("probe_locality_acc", "probe loc", 10, ".1f"),
           ("probe_true_acc", "probe true", 11, ".1f"), ("perplexity_change_pct", "ppl %", 8, "+.2f"),
           ("weight_drift", "dW/W", 8, ".4f"))
#: interference table, one line per checkpoint window: (key of the window summary, label, width, format)
WINDOW_COLUMNS = (("applied", "applied", 8, "d"), ("update_norm_median", "|dW| med", 10, ".3g"),
                  ("update_norm_max", "|dW| max", 10, ".3g"), ("key_overlap_max_max", "cos max", 9, ".3f"),
                  ("moves_earlier_max_median", "moves med", 10, ".3f"),
                  ("moves_earlier_max_max", "moves max", 10, ".3f"), ("loss_evals_median", "evals med", 10, ".0f"),
                  ("at_budget", "budget", 7, "d"), ("at_plateau", "plateau", 8, "d"), ("wall_s_mean", "s/edit", 8, ".2f"))


def cell(value: Any, width: int, spec: str) -> str:
    """``value`` formatted right-aligned in ``width``; None and NaN as ``-``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return f"{'-':>{width}}"
    return f"{format(value, spec):>{width}}"


def _ladder(res: dict) -> str:
    """The row's update rule and clamp ladder, from its config dict."""
    upd = res["config"].get("update", {})
    ladder = upd.get("clamp_ladder") or [res["config"].get("objective", {}).get("clamp_norm_factor")]
    return f"rule {upd.get('rule')}, clamp {' > '.join(f'{c:g}' for c in ladder)}"


def format_checkpoint(name: str, row: dict) -> str:
    """One checkpoint of a running row as it lands: the row's name and its :data:`COLUMNS` cells
    with their labels (the full table follows at the end of the run)."""
    return f"{name}: " + ", ".join(f"{label.strip()} {cell(row[k], 0, spec).strip()}" for k, label, _, spec in COLUMNS)


def table_lines(rows: list[dict]) -> list[str]:
    """The checkpoint table of ``rows`` (a row result's ``table``): the :data:`COLUMNS` header, one line a checkpoint."""
    return ["".join(f"{label:>{w}}" for _, label, w, _ in COLUMNS)] + [
        "".join(cell(r[k], w, spec) for k, _, w, spec in COLUMNS) for r in rows]


def format_row(res: dict) -> str:
    """One row's report: heading, checkpoint table, per-window interference table and undo line."""
    lines = [f"row {res['row']}: {res['method']} on {res['model']} (layer {res['layer']}, {_ladder(res)}, "
             f"force={res['force']}; probe: {res['probe_requests']} unedited facts, true-answer acc before "
             f"editing {res['probe_true_acc_unedited']:.1f}; held-out perplexity before "
             f"{cell(res['perplexity_unedited'], 0, '.3f').strip()})",
             *table_lines(res["table"])]
    lines.append(f"{'edits':>9}" + "".join(f"{label:>{w}}" for _, label, w, _ in WINDOW_COLUMNS))
    for r in res["table"]:
        win = r["window"]
        lines.append(f"{win['first']:>4}-{win['last']:<4}" + "".join(cell(win.get(k), w, s) for k, _, w, s in WINDOW_COLUMNS))
    u = res["undo"]
    lines.append(f"undo: {u['bit_exact']}/{u['random_undos']} random undos bit-exact against an independent "
                 f"rebuild; other parameters untouched: {u['other_params_untouched']}; undoing every edit "
                 f"restores the unedited model bit for bit: {u['undo_all_restores_unedited_model']}")
    return "\n".join(lines)


LEGEND = ("* ret acc: efficacy of the applied edits only; loc acc: neighbours of the edited facts; probe "
          "loc/true: never-edited facts (percent); ppl %: held-out perplexity change vs the unedited model; "
          "dW/W: relative weight drift.\n  Per window of edits (applied edits only): |dW| = ‖u‖‖w‖ of each "
          "update; cos max: largest |cos| of its key with an earlier edit's key; moves: ‖ΔW_i k_j‖ / "
          "‖ΔW_j k_j‖, its largest over the earlier edits j (median and max over the window); budget / plateau: "
          "edits whose last search ran out of its budget / stopped at a loss plateau (zo.patience), not on success.")


def format_summary(results: list[dict]) -> str:
    """The rows side by side at their last checkpoint, with the largest ``moves_earlier_max`` of
    any applied edit, the undo verdict and the row's wall time."""
    head = (f"{'row':<18}{'edits':>6}{'applied':>8}{'eff acc':>8}{'gen acc':>8}{'loc acc':>8}{'probe loc':>10}"
            f"{'probe true':>11}{'ppl %':>8}{'dW/W':>8}{'moves max':>10}{'undo':>6}{'wall s':>8}")
    lines = [head]
    for res in results:
        last = res["table"][-1]
        moves = [e["moves_earlier_max"] for e in res["edits"] if e["applied"] and e.get("moves_earlier_max") is not None]
        u = res["undo"]
        ok = u["bit_exact"] == u["random_undos"] and u["undo_all_restores_unedited_model"]
        lines.append(f"{res['row']:<18}" + "".join(cell(last[k], w, s) for k, w, s in (
            ("edits", 6, "d"), ("applied", 8, "d"), ("efficacy_acc", 8, ".1f"), ("generalization_acc", 8, ".1f"),
            ("locality_acc", 8, ".1f"), ("probe_locality_acc", 10, ".1f"), ("probe_true_acc", 11, ".1f"),
            ("perplexity_change_pct", 8, "+.2f"), ("weight_drift", 8, ".4f")))
            + cell(max(moves) if moves else None, 10, ".3f") + f"{'ok' if ok else 'FAIL':>6}"
            + cell(res["wall_seconds"], 8, ".0f"))
    return "\n".join(lines)


def output_paths(out: str | Path) -> tuple[Path, Path]:
    """(result JSON, figure PNG) of ``--out``: ``DIR/sequential.json`` and ``DIR/sequential.png``,
    or, for a path ending in ``.json``, that file and the ``.png`` beside it."""
    out = Path(out)
    if out.suffix == ".json":
        return out, out.with_suffix(".png")
    return out / RESULT_FILE, out / FIGURE_FILE


def _bad_file(path: Path, why: str) -> ConfigError:
    return ConfigError(f"not a sequential result file ({why})", where=str(path),
                       fix="move it away or choose another --out")


def load_saved(path: Path) -> dict[str, dict]:
    """The rows saved in the result file ``path`` by name ({} when there is none).

    Raises:
        ConfigError: the file is not a result file of this command (malformed JSON, no rows).
    """
    from .jsonio import JSONProblem, loads_strict

    if not path.is_file():
        return {}
    try:
        doc = loads_strict(path.read_text(encoding="utf-8"))
    except (JSONProblem, UnicodeDecodeError) as e:
        raise _bad_file(path, str(e)) from None
    rows = doc.get("rows") if isinstance(doc, dict) and doc.get("format") == FORMAT else None
    if not isinstance(rows, list) or not all(isinstance(r, dict) and isinstance(r.get("row"), str) for r in rows):
        raise _bad_file(path, f"no 'format': {FORMAT!r} with a list of rows")
    return {r["row"]: r for r in rows}


def reusable(saved: dict | None, identity: dict) -> bool:
    """Whether ``saved`` (a row of the result file, or None) was measured with ``identity``
    (compared as JSON: tuples and lists alike) and finished (a ``partial`` row, saved at a
    checkpoint of a run stopped before its end, is run again)."""
    return (saved is not None and not saved.get("partial")
            and saved.get("identity") == json.loads(json.dumps(identity)))


def save_results(path: Path, header: dict, results: list[dict], saved: dict[str, dict]) -> None:
    """Write the result file atomically: ``header``, this run's ``results`` in order (``run_rows``
    names them), then the rows of ``saved`` this run did not name (kept, not lost)."""
    from .atomic import atomic_write_text

    names = {r["row"] for r in results}
    rows = results + [r for name, r in saved.items() if name not in names]
    atomic_write_text(path, json.dumps({"format": FORMAT, "version": 1, **header,
                                        "run_rows": [r["row"] for r in results], "rows": rows}, indent=1))
