"""bench-shape's rows and shapes (issue 17): rome, rome-lean on the int8-stored weights, MobiEdit;
the ratios between them; the 3B shape is Qwen2.5-3B's size. The timed run itself is a benchmark."""
from __future__ import annotations

import dataclasses

import pytest
import torch

from mobiedit.bench_shape import SHAPE_ROWS, SHAPES, shape_config, shape_ratios
from mobiedit.errors import ConfigError
from mobiedit.forward.quant import QuantConfig
from mobiedit.recipes import FZOO


def test_rows_share_one_step_count_and_lean_backprop_is_rome_on_the_prefix_graph():
    rome, lean, mob = (shape_config(r, 5, 3) for r in ("rome", "rome-lean", "mobiedit"))
    assert (rome.steps, lean.steps, mob.zo.max_steps) == (3, 3, 3) and not mob.early_stop
    assert lean.prefix_reuse and not rome.prefix_reuse and rome.early_loss == lean.early_loss == 0.0
    assert mob.zo.estimator == FZOO.zo.estimator and mob.zo.n_dirs == FZOO.zo.n_dirs and mob.zo.lr == FZOO.zo.lr
    assert {r: SHAPE_ROWS[r] for r in ("rome", "rome-lean", "mobiedit")} == {
        "rome": "fp32", "rome-lean": "w8a16", "mobiedit": "w8a16"}  # lean: MobiEdit's weights
    assert rome.quant.scheme == lean.quant.scheme == "none" and mob.quant.scheme == "w8a16"


def test_bf16_rows_are_the_same_searches_on_bf16_matmuls_of_the_float_checkpoint():
    lean, mob = shape_config("rome-lean", 5, 3), shape_config("mobiedit", 5, 3)
    lean16, mob16 = shape_config("rome-lean-bf16", 5, 3), shape_config("mobiedit-bf16", 5, 3)
    assert lean16.quant == mob16.quant == QuantConfig("bf16", head_dtype="bfloat16")  # the head as the int8 checkpoint's
    assert SHAPE_ROWS["rome-lean-bf16"] == SHAPE_ROWS["mobiedit-bf16"] == "fp32"  # bf16 is a loop scheme
    assert dataclasses.replace(lean16, quant=lean.quant) == lean and dataclasses.replace(mob16, quant=mob.quant) == mob
    with pytest.raises(ConfigError, match="--rows"):
        shape_config("mobiedit-fp16", 5, 3)
    # -bf16h: the same bf16 search, its read-out's differences on bf16 operands too
    mob16h = shape_config("mobiedit-bf16h", 5, 3)
    assert mob16h.quant == QuantConfig("bf16", head_dtype="bfloat16", head_matmul="bf16")
    assert dataclasses.replace(mob16h, quant=mob16.quant) == mob16 and SHAPE_ROWS["mobiedit-bf16h"] == "fp32"


def test_ratios_pair_every_measured_row():
    row = lambda rss, net, wall: {"peak_rss_mb": rss, "peak_minus_runtime_mb": net, "wall_per_step_s": wall}
    r = shape_ratios({"rome": row(400, 200, 2.0), "rome-lean": row(200, 100, 1.0), "mobiedit": row(100, 50, 0.5)})
    assert r["mobiedit/rome"] == {"peak_rss": 0.25, "peak_rss_net_of_runtime": 0.25, "wall_per_step": 0.25, "same_run": True}
    assert r["mobiedit/rome-lean"]["wall_per_step"] == 0.5 and r["rome-lean/rome"]["peak_rss"] == 0.5
    assert list(shape_ratios({"rome": row(1, 1, 1), "mobiedit": row(1, 1, 1)})) == ["mobiedit/rome"]
    r = shape_ratios({"rome": row(400, 200, 2.0), "rome-lean-bf16": row(300, 100, 0.5), "mobiedit-bf16": row(200, 50, 1.0)})
    assert sorted(r) == ["mobiedit-bf16/rome", "mobiedit-bf16/rome-lean-bf16", "rome-lean-bf16/rome"]
    assert r["mobiedit-bf16/rome-lean-bf16"]["wall_per_step"] == 2.0  # the same precision's backprop row


def test_shapes_have_their_models_sizes():
    from transformers import AutoConfig, AutoModelForCausalLM

    for name, billions in (("qwen2-0.5b", 0.494), ("qwen2-3b", 3.09)):
        family, kw = SHAPES[name]
        with torch.device("meta"):
            m = AutoModelForCausalLM.from_config(AutoConfig.for_model(family, **kw))
        n = sum(p.numel() for p in m.parameters()) / 1e9  # tied embeddings counted once
        assert n == pytest.approx(billions, rel=0.01), name


def test_bad_rows_are_named(capsys):
    from mobiedit.cli import main

    assert main(["bench-shape", "--shape", "qwen2-tiny", "--rows", "mobiedit"]) == 2  # no rome: no base
    assert "--rows" in capsys.readouterr().err
    assert main(["bench-shape", "--shape", "nope"]) == 2


def test_a_stopped_run_resumes_its_finished_rows_and_says_which_wall_ratios_are_not_measured(tmp_path):
    from mobiedit.bench_shape import row_identity, rows_dir_for, save_row, saved_row

    rows_dir = rows_dir_for(str(tmp_path / "shape3b.json"))
    assert rows_dir == tmp_path / "shape3b.json.rows" and rows_dir_for(None) is None
    ident = row_identity("qwen2-tiny", "rome", 5, 2)
    assert saved_row(rows_dir, ident) is None  # nothing saved yet
    row = {"peak_rss_mb": 400, "peak_minus_runtime_mb": 200, "wall_per_step_s": 2.0, "run_id": "a"}
    save_row(rows_dir, ident, row)
    assert saved_row(rows_dir, ident) == row
    assert saved_row(rows_dir, row_identity("qwen2-tiny", "rome", 5, 3)) is None  # other step count: rerun
    assert saved_row(rows_dir, row_identity("qwen2-tiny", "rome", 4, 2)) is None  # other layer
    (rows_dir / "rome.json").write_text("{not json")
    assert saved_row(rows_dir, ident) is None
    mob = {"peak_rss_mb": 100, "peak_minus_runtime_mb": 50, "wall_per_step_s": 0.5}
    assert shape_ratios({"rome": row, "mobiedit": mob | {"run_id": "a"}})["mobiedit/rome"]["same_run"]
    assert not shape_ratios({"rome": row, "mobiedit": mob | {"run_id": "b"}})["mobiedit/rome"]["same_run"]


def test_the_allocator_mode_is_part_of_a_saved_rows_identity():
    from mobiedit.bench_shape import row_identity

    fixed = row_identity("qwen2-tiny", "mobiedit", 1, 2)
    assert row_identity("qwen2-tiny", "mobiedit", 1, 2, "fixed") == fixed and "malloc" not in fixed  # rows saved before
    assert row_identity("qwen2-tiny", "mobiedit", 1, 2, "glibc") == fixed | {"malloc": "glibc"}


def test_the_ort_row_is_mobiedits_search_with_its_own_settings_in_its_identity():
    from mobiedit.bench_shape import row_identity

    assert shape_config("mobiedit-ort", 5, 3) == shape_config("mobiedit", 5, 3)  # the same search, other host
    assert SHAPE_ROWS["mobiedit-ort"] == "fp32"  # its programs are exported from the float checkpoint
    ort = {"bits": 4, "head_bits": 4, "program_K": 1}
    ident = row_identity("qwen2-0.5b", "mobiedit-ort", 5, 3, ort=ort)
    assert ident["ort"] == ort and row_identity("qwen2-0.5b", "mobiedit-ort", 5, 3, ort=ort | {"bits": 8}) != ident
    assert "ort" not in row_identity("qwen2-0.5b", "mobiedit", 5, 3, ort=ort)  # other rows: unchanged identities
    row = lambda rss: {"peak_rss_mb": rss, "peak_minus_runtime_mb": rss / 2, "wall_per_step_s": 1.0}
    assert sorted(shape_ratios({"rome": row(400), "mobiedit-ort": row(40)})) == ["mobiedit-ort/rome"]


def test_a_bad_ort_k_is_named(capsys):
    from mobiedit.cli import main

    assert main(["bench-shape", "--shape", "qwen2-tiny", "--rows", "rome,mobiedit-ort", "--ort-k", "0"]) == 2
    assert "--ort-k" in capsys.readouterr().err
