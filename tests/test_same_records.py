"""tools/same_records.py: two row logs compared edit by edit (NaN scores equal, wall time ignored)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TOOL = Path(__file__).resolve().parents[1] / "tools" / "same_records.py"


def _log(path: Path, recs: list[dict]) -> Path:
    path.write_text("\n".join(json.dumps(r) for r in [{"identity": {}}, *recs]) + "\n")
    return path


def _rec(case: str, evals: int, gen: float, wall: float) -> dict:
    return {"case_id": case, "loss_evals": evals, "status": "SUCCESS_CHECK", "succeeded": True, "wall_s": wall,
            "write": {"holds": True, "loss": 0.1}, "scores": {"generalization_prob": gen, "fluency": float("nan")}}


def test_identical_edits_pass_and_a_changed_score_is_named(tmp_path):
    a = _log(tmp_path / "a.jsonl", [_rec("1", 10, 1.0, 5.0), _rec("2", 20, 0.5, 6.0), _rec("3", 5, 1.0, 1.0)])
    b = _log(tmp_path / "b.jsonl", [_rec("1", 10, 1.0, 9.0), _rec("2", 20, 0.5, 2.0)])
    out = subprocess.run([sys.executable, str(TOOL), str(a), str(b)], capture_output=True, text=True)
    assert out.returncode == 0 and "2 shared requests: 2 identical, 0 differ" in out.stdout
    c = _log(tmp_path / "c.jsonl", [_rec("1", 10, 1.0, 5.0), _rec("2", 20, 0.0, 6.0)])
    out = subprocess.run([sys.executable, str(TOOL), str(a), str(c)], capture_output=True, text=True)
    assert out.returncode == 1 and "1 identical, 1 differ" in out.stdout and "differs: 2" in out.stdout
