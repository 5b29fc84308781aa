"""``tools/plot_sequential.py``: rows of several sequential result files in one figure."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def test_rows_of_two_files_make_one_png_and_a_file_that_is_not_one_is_named(tmp_path):
    from tools.plot_sequential import main, rows

    a, b = (ROOT / "results/seq_smollm2_425" / f for f in ("sequential_rome.json", "sequential.json"))
    assert [r["row"] for r in rows([a, b])] == ["rome-s2rp", "mobiedit-s2rp"]
    png = tmp_path / "both.png"
    assert main([str(a), str(b), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not list(tmp_path.glob("*.tmp*"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "something else"}))
    with pytest.raises(SystemExit, match="bad.json: not a mobiedit sequential result file"):
        main([str(bad), "--out", str(tmp_path / "x.png")])
    assert not (tmp_path / "x.png").exists()


def test_bundle_runs_side_by_side_make_one_png_and_bad_input_is_named(tmp_path):
    from tools.plot_bundle_sequential import main

    a = ROOT / "results/bundle_seq_rows/bundle_sequential_B.json"
    b = ROOT / "results/bundle_seq_rows/bundle_sequential_R.json"
    png = tmp_path / "rules.png"
    assert main([str(a), str(b), "--out", str(png)]) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and not list(tmp_path.glob("*.tmp*"))
    with pytest.raises(SystemExit, match="--labels: 1 labels for 2 files"):
        main([str(a), str(b), "--labels", "x", "--out", str(tmp_path / "y.png")])
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"table": []}))
    with pytest.raises(SystemExit, match="bad.json: not a bench-bundle-sequential result file"):
        main([str(bad), "--out", str(tmp_path / "x.png")])
    assert not (tmp_path / "x.png").exists() and not (tmp_path / "y.png").exists()
