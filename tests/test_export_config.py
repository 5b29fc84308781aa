"""Export configs validate themselves and name the offending field."""
from __future__ import annotations

import pytest

from mobiedit.errors import ConfigError
from mobiedit.export.config import (EditSetup, EditShapes, ExportConfig, InferenceShapes, LowerConfig,
                                    QuantizeConfig)


@pytest.mark.parametrize("build, field", [
    (lambda: InferenceShapes(max_seq_len=1), "inference.max_seq_len"),
    (lambda: InferenceShapes(max_seq_len=16, prefill_chunk=32), "inference.prefill_chunk"),
    (lambda: InferenceShapes(slots=0), "inference.slots"),
    (lambda: EditShapes(K=0), "edit_shapes.K"),
    (lambda: EditShapes(rows=2, kl=2), "edit_shapes.kl"),
    (lambda: QuantizeConfig(scheme="int3"), "quant.scheme"),
    (lambda: QuantizeConfig(edit_scheme="int3"), "quant.edit_scheme"),
    (lambda: QuantizeConfig(qdq_ops=()), "quant.qdq_ops"),
    (lambda: LowerConfig(runtime="tflite"), "lower.runtime"),
    (lambda: EditSetup(layer=-1), "edit.layer"),
    (lambda: EditSetup(ridge=2.0), "edit.ridge"),
    (lambda: ExportConfig(quant=QuantizeConfig(scheme="8da8w"), lower=LowerConfig(runtime="onnxruntime")),
     "quant.scheme"),
    (lambda: ExportConfig(quant=QuantizeConfig(scheme="qdq_a16w8")), "quant"),
    (lambda: ExportConfig(inference="big"), "ExportConfig.inference"),
])
def test_invalid_values_name_the_field(build, field):
    with pytest.raises(ConfigError) as e:
        build()
    assert field in str(e.value) and "fix:" in str(e.value)


def test_edit_scheme_resolution():
    assert ExportConfig().quant.resolved_edit_scheme == "fp32"
    # plain per-token int8 activations would erase the ZO signal: delta-decomposed / weight-only
    assert ExportConfig(quant=QuantizeConfig(scheme="8da8w")).quant.resolved_edit_scheme == "delta"
    assert ExportConfig(quant=QuantizeConfig(scheme="8da4w")).quant.resolved_edit_scheme == "w8"
    for scheme in ("8da8w", "8da4w"):
        assert QuantizeConfig(scheme=scheme, edit_scheme="same").resolved_edit_scheme == scheme
    q = ExportConfig(quant=QuantizeConfig(scheme="qdq_a16w8"), lower=LowerConfig(runtime="onnxruntime")).quant
    assert q.resolved_edit_scheme == "qdq_a16w8"
    assert EditShapes(prefix=10, suffix=6).tokens == 16


@pytest.mark.parametrize("K", [1, 5, 17])
def test_the_shipped_recipe_is_the_methods_config_fitted_to_K(K):
    """One definition: the bundle recipe is MobiEditConfig()'s search and success rule, FZOO's
    n_dirs fitted to the edit programs' static K (one program call per step), checked on the step's
    own row (``check_at`` "base": on a static batch a check of its own costs a whole program call)."""
    import dataclasses

    from mobiedit.export.recipe import ZO_FIELDS, ZO_OPTIONAL, shipped_recipe
    from mobiedit.methods.mobiedit import MobiEditConfig

    cfg, r = MobiEditConfig(), shipped_recipe(K)
    assert r.zo == dataclasses.replace(cfg.zo, n_dirs=max(1, K - 1), check_at="base") and r.zo.estimator == "fzoo"
    assert cfg.zo.check_at == "update"  # the eager host scores a check's point once either way (driver.reuse_checked)
    assert (r.success_fraction, r.success_nll) == (cfg.success_fraction, cfg.success_nll)
    m = r.as_manifest()
    assert list(m["zo"]) == list(ZO_FIELDS + ZO_OPTIONAL) and "max_norm" not in m["zo"]
    assert m["success"] == {"fraction": cfg.success_fraction, "nll": cfg.success_nll, "stop_on": "written"}
    assert m["zo"]["n_dirs"] == max(1, K - 1) and m["zo"]["lr"] == cfg.zo.lr


@pytest.mark.parametrize("K", [2, 17])
def test_a_bundle_can_ship_the_whole_gradient_recipe(K):
    """`export --recipe fzoo-grad`: recipes.FZOO_GRADIENT fitted to K, round-tripped through the
    manifest reader; an unknown name is refused naming the field."""
    import dataclasses

    from mobiedit.errors import ConfigError
    from mobiedit.export.config import EditSetup
    from mobiedit.export.recipe import check_recipe, shipped_recipe
    from mobiedit.recipes import FZOO_GRADIENT

    r = shipped_recipe(K, "fzoo-grad")
    assert r.zo == dataclasses.replace(FZOO_GRADIENT.zo, n_dirs=K - 1, check_at="base")
    assert (r.zo.directions, r.zo.normalise, r.success_nll) == ("coordinates", "gradient", FZOO_GRADIENT.success.nll)
    back = check_recipe(r.as_manifest(), "manifest.json")
    assert back.zo == r.zo and back.success_nll == r.success_nll
    assert EditSetup(recipe="fzoo-grad").recipe == "fzoo-grad"
    with pytest.raises(ConfigError) as e:
        EditSetup(recipe="adam")
    assert e.value.where == "ExportConfig.edit.recipe" and "fzoo-grad" in e.value.fix
    with pytest.raises(ConfigError, match="fzoo-grad"):
        shipped_recipe(K, "adam")


def test_the_recipe_flag_reaches_the_export_config():
    from mobiedit.cli import build_parser
    from mobiedit.export.cli import config_from_args

    args = build_parser().parse_args(["export", "--out", "x", "--recipe", "fzoo-grad"])
    assert config_from_args(args).edit.recipe == "fzoo-grad"
    args = build_parser().parse_args(["export", "--out", "x"])
    assert config_from_args(args).edit.recipe == "fzoo"


def test_a_bundle_can_ship_the_lr2_recipe():
    """`export --recipe fzoo-lr2`: recipes.FZOO_LR2 (the shipped search at Adam lr 2) fitted to K and
    round-tripped through the manifest reader; the bench row of that name runs the same search."""
    import dataclasses

    from mobiedit.bench_rows import row_config
    from mobiedit.export.config import EditSetup
    from mobiedit.export.recipe import check_recipe, shipped_recipe
    from mobiedit.recipes import FZOO, FZOO_LR2

    r = shipped_recipe(9, "fzoo-lr2")
    assert r.zo == dataclasses.replace(FZOO.zo, lr=2.0, n_dirs=8, check_at="base") and FZOO_LR2.success == FZOO.success
    assert check_recipe(r.as_manifest(), "manifest.json").zo == r.zo
    assert EditSetup(recipe="fzoo-lr2").recipe == "fzoo-lr2"
    assert row_config("fzoo-lr2", 1, 0, (), None).zo == FZOO_LR2.zo
