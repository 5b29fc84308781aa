"""``tools/paired_rows.py``: row logs read on the requests they share — the figures over the shared
requests only, the per-request higher / lower counts, and the JSON and PNG it writes."""
from __future__ import annotations

import json
import sys

import pytest

from tools.paired_rows import main, paired, wins

SCORES = ("efficacy_acc", "generalization_acc", "efficacy_prob", "generalization_prob", "locality_unchanged")


def _record(case: str, gen: float, loc: float, evals: int) -> dict:
    scores = {k: 1.0 for k in SCORES}
    scores.update(generalization_acc=gen, locality_unchanged=loc)
    return {"case_id": case, "scores": scores, "succeeded": True, "loss_evals": evals, "wall_s": 2.0,
            "write": {"loss": 0.1}}


def _log(path, row: str, recs: list[dict]):
    path.write_text("\n".join(json.dumps(x) for x in [{"identity": {"row": row}}, *recs]) + "\n")
    return path


@pytest.fixture
def logs(tmp_path):
    a = _log(tmp_path / "row-a.jsonl", "a", [_record("c1", 0.0, 1.0, 10), _record("c2", 0.5, 1.0, 30),
                                             _record("c3", 1.0, 0.0, 99)])
    b = _log(tmp_path / "row-b.jsonl", "b", [_record("c1", 1.0, 1.0, 20), _record("c2", 0.5, 0.5, 40)])
    return a, b


def test_figures_are_over_the_shared_requests_and_counts_are_paired(logs):
    from tools.paired_rows import read_log

    recs = {p.stem: read_log(p)[1] for p in logs}
    common, table = paired(recs)
    assert common == ["c1", "c2"]  # c3 is in one log only
    assert table["row-a"]["gen"] == pytest.approx(25.0) and table["row-b"]["gen"] == pytest.approx(75.0)
    assert table["row-a"]["locU"] == pytest.approx(100.0) and table["row-b"]["locU"] == pytest.approx(75.0)
    assert table["row-a"]["evals(med)"] == 20 and table["row-b"]["evals(med)"] == 30
    assert wins(recs["row-b"], recs["row-a"], common, "generalization_acc") == (1, 0)
    assert wins(recs["row-b"], recs["row-a"], common, "locality_unchanged") == (0, 1)


def test_main_prints_the_counts_and_writes_json_and_png(logs, tmp_path, monkeypatch, capsys):
    out_json, out_png = tmp_path / "t.json", tmp_path / "t.png"
    monkeypatch.setattr(sys, "argv", ["paired_rows", *map(str, logs), "--json", str(out_json), "--png", str(out_png)])
    main()
    text = capsys.readouterr().out
    assert "2 requests shared by 2 logs" in text and "gen higher on 1 / lower on 0" in text
    res = json.loads(out_json.read_text())
    assert res["case_ids"] == ["c1", "c2"] and set(res["scores"]) == set(res["table"])
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_perplexity_and_fluency_only_where_every_shared_request_measured_them(logs):
    import math

    from tools.paired_rows import read_log

    recs = {p.stem: read_log(p)[1] for p in logs}
    for case, (pre, post) in {"c1": (10.0, 10.2), "c2": (20.0, 19.8)}.items():
        recs["row-a"][case]["scores"].update(perplexity_pre=pre, perplexity=post, fluency_pre=4.0, fluency=5.0)
    common, table = paired(recs)
    assert table["row-a"]["ppl%"] == pytest.approx((2.0 - 1.0) / 2)  # the mean of +2 % and -1 %
    assert (table["row-a"]["flu pre"], table["row-a"]["flu post"]) == (4.0, 5.0)
    assert all(math.isnan(table["row-b"][c]) for c in ("ppl%", "flu pre", "flu post"))  # a --no-ability log
    recs["row-a"]["c2"]["scores"]["perplexity"] = float("nan")  # one request not measured: no figure
    assert math.isnan(paired(recs)[1]["row-a"]["ppl%"])
