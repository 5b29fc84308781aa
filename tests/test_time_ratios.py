"""tools/time_ratios.py: a run's s/edit as ratios against reference rows, on the requests every row finished."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "time_ratios.py"


def _log(run: Path, row: str, walls: dict[str, float], evals: int = 10) -> None:
    recs = [{"case_id": c, "wall_s": w, "loss_evals": evals, "peak_rss_mb": 100.0} for c, w in walls.items()]
    (run / f"row-{row}-L5.jsonl").write_text("\n".join(json.dumps(r) for r in [{"identity": {}}, *recs]) + "\n")


def test_ratios_are_of_means_and_per_request_on_shared_requests(tmp_path):
    _log(tmp_path, "rome", {"a": 10.0, "b": 20.0, "c": 99.0})
    _log(tmp_path, "fzoo-x", {"a": 5.0, "b": 4.0}, evals=40)  # c unfinished: left out of every row
    out = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "--ref", "rome"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("2 requests every row finished")
    line = next(ln for ln in out.stdout.splitlines() if ln.startswith("| fzoo-x "))
    # means 4.5 / 15 = 0.300; per request 0.5 and 0.2 -> median 0.350; s/eval median (5/40, 4/40) = 0.1125
    assert "| 4.50 | 4.50 | 0.300; 0.350 | 40 | 0.113 | 100 |" in line, line


def test_an_unknown_reference_row_or_an_empty_folder_is_named(tmp_path):
    out = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "--ref", "rome"], capture_output=True, text=True)
    assert out.returncode != 0 and "no row logs" in out.stderr and "Traceback" not in out.stderr
    _log(tmp_path, "rome", {"a": 1.0})
    out = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "--ref", "rome-lean"], capture_output=True, text=True)
    assert out.returncode != 0 and "--ref rome-lean" in out.stderr and "Traceback" not in out.stderr


def test_a_reference_run_with_settings_is_found_by_its_row_name(tmp_path):
    _log(tmp_path, "rome-dadf83d1", {"a": 2.0})
    _log(tmp_path, "fzoo", {"a": 1.0})
    out = subprocess.run([sys.executable, str(TOOL), str(tmp_path), "--ref", "rome"], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert "÷ rome-dadf83d1" in out.stdout and "| fzoo | 1.00 | 1.00 | 0.500; 0.500 |" in out.stdout
