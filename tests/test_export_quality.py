"""The bench rows' per-request log (mobiedit.rowlog): resumable, a line cut short by a kill is
ignored, and a log of another run is refused."""
from __future__ import annotations

import pytest

from mobiedit.errors import ConfigError
from mobiedit.evaluate import RequestScores
from mobiedit.rowlog import RowLog


def _scores(i: int, eff: float) -> RequestScores:
    return RequestScores(str(i), eff, 0.5, 1.0, eff, 0.5, 1.0)


def test_rowlog_resumes_and_ignores_a_torn_line(tmp_path):
    path = tmp_path / "row.jsonl"
    log = RowLog(path, identity={"row": "fzoo", "n": 3})
    log.add("1", _scores(1, 1.0), succeeded=True, loss_evals=400, wall_s=2.0)
    log.add("2", _scores(2, 0.0), succeeded=False, loss_evals=3000, wall_s=9.0)
    with open(path, "a") as f:
        f.write('{"case_id": "3", "scores": {"case_')  # a kill mid-line
    again = RowLog(path, identity={"row": "fzoo", "n": 3})
    assert sorted(again.done) == ["1", "2"]
    s = again.summary("r", ["1", "2", "3"])
    assert s["n"] == 2 and s["success_rate"] == 50.0 and s["loss_evals_median_success"] == 400
    assert s["quality"]["efficacy_acc"] == 50.0 and s["wall_per_edit_s"] == 5.5
    again.add("3", _scores(3, 1.0), succeeded=True, loss_evals=600, wall_s=3.0)  # after the dropped fragment
    assert sorted(RowLog(path).done) == ["1", "2", "3"]
    assert [r["case_id"] for r in RowLog(path).records(["3", "1", "9"])] == ["3", "1"]


def test_rowlog_of_another_run_is_refused(tmp_path):
    path = tmp_path / "row.jsonl"
    RowLog(path, identity={"row": "fzoo", "seed": 0}).add("1", _scores(1, 1.0), succeeded=True, loss_evals=1, wall_s=1.0)
    with pytest.raises(ConfigError, match="seed") as e:
        RowLog(path, identity={"row": "fzoo", "seed": 1})
    assert "--out" in str(e.value)
