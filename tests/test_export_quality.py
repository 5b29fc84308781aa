"""The export quality bench's per-request log: resumable, and a line cut short by a kill is ignored."""
from __future__ import annotations

from mobiedit.evaluate import RequestScores
from mobiedit.export.quality import RowLog
from mobiedit.requests import EditRequest


def _req(i: int) -> EditRequest:
    return EditRequest(case_id=str(i), prompt="{} plays", subject=f"S{i}", target_new="x", target_true="y")


def _scores(i: int, eff: float) -> RequestScores:
    return RequestScores(str(i), eff, 0.5, 1.0, eff, 0.5, 1.0)


def test_rowlog_resumes_and_ignores_a_torn_line(tmp_path):
    path = tmp_path / "row.jsonl"
    log = RowLog(path)
    log.add(_req(1), _scores(1, 1.0), True, 400, 2.0)
    log.add(_req(2), _scores(2, 0.0), False, 3000, 9.0)
    with open(path, "a") as f:
        f.write('{"case_id": "3", "scores": {"case_')  # a kill mid-line
    again = RowLog(path)
    assert sorted(again.done) == ["1", "2"]
    s = again.summary("r", [_req(1), _req(2), _req(3)])
    assert s["n"] == 2 and s["success_rate"] == 50.0 and s["loss_evals_median_success"] == 400
    assert s["quality"]["efficacy_acc"] == 50.0 and s["wall_per_edit_s"] == 5.5
    again.add(_req(3), _scores(3, 1.0), True, 600, 3.0)  # appends after the dropped fragment
    assert sorted(RowLog(path).done) == ["1", "2", "3"]
