"""Method configs: a partial YAML is merged over the defaults (issue 15: ``zo: {lr: 0.3}`` used to
rebuild ``zo`` from ``ZOConfig()``'s defaults and silently drop MobiEdit's FZOO recipe)."""
from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from mobiedit.config_io import from_dict, load_yaml, merge
from mobiedit.errors import ConfigError
from mobiedit.methods.mobiedit import MobiEditConfig
from mobiedit.resolve import method_config
from mobiedit.editing.config import ROMEConfig


def test_partial_zo_keeps_the_shipped_recipe(tmp_path):
    shipped = MobiEditConfig()
    y = tmp_path / "cfg.yaml"
    y.write_text("zo:\n  lr: 0.3\nquant:\n  scheme: w8a8\n")
    cfg = load_yaml(MobiEditConfig, y)
    assert cfg.zo.lr == 0.3 and cfg.quant.scheme == "w8a8"
    assert dataclasses.replace(cfg.zo, lr=shipped.zo.lr) == shipped.zo  # estimator, n_dirs, h, budget kept
    assert cfg.zo.estimator == "fzoo" and cfg.zo.n_dirs == 16
    assert dataclasses.replace(cfg, zo=shipped.zo, quant=shipped.quant) == shipped
    # the CLI path: YAML, then --layer and --seed merged over it
    c2 = method_config("mobiedit", 3, str(y), seed=7)
    assert c2.layer == 3 and c2.zo.seed == 7 and c2.zo.lr == 0.3 and c2.zo.estimator == "fzoo"


def test_merge_over_an_instance_keeps_its_values():
    base = from_dict(MobiEditConfig, {"zo": {"n_dirs": 8}})
    out = merge(base, {"zo": {"lr": 0.1}, "early_stop": False})
    assert (out.zo.n_dirs, out.zo.lr, out.early_stop) == (8, 0.1, False)
    assert base.zo.lr == MobiEditConfig().zo.lr  # the base is not changed
    assert from_dict(ROMEConfig, {}) == ROMEConfig()


@pytest.mark.parametrize("data, where", [
    ({"zo": {"lrr": 0.3}}, "zo"),
    ({"zo": 3}, "zo"),
    ({"zo": {"n_dirs": 0}}, "n_dirs"),
    ({"bogus": 1}, "MobiEditConfig"),
    ({"zo": {"lr": "fast"}}, "zo.lr: expected float, got str"),
    ({"zo": {"n_dirs": 2.5}}, "zo.n_dirs: expected int"),
    ({"early_stop": 1}, "early_stop: expected bool"),
    ({"zo": {"lr": True}}, "zo.lr: expected float, got bool"),
])
def test_bad_keys_and_values_name_the_field(data, where):
    with pytest.raises(ConfigError) as e:
        from_dict(MobiEditConfig, data)
    assert where in str(e.value)


def test_yaml_exponents_without_a_dot_are_floats(tmp_path):
    # PyYAML follows YAML 1.1, where `1e-4` is a string; a config file means the number
    y = tmp_path / "cfg.yaml"
    y.write_text("update:\n  rule: nullspace\n  nullspace_threshold: 2e-4\nlr: 1E+0\nmom2_ridge: '1e-3'\n")
    with pytest.raises(ConfigError) as e:  # a quoted value stays a string, and is named
        load_yaml(ROMEConfig, y)
    assert "mom2_ridge: expected float, got str '1e-3'" in str(e.value)
    y.write_text("update:\n  rule: nullspace\n  nullspace_threshold: 2e-4\nlr: 1E+0\nsteps: 40\n")
    cfg = load_yaml(ROMEConfig, y)
    assert (cfg.update.nullspace_threshold, cfg.lr, cfg.steps) == (2e-4, 1.0, 40)
    assert isinstance(cfg.lr, float) and isinstance(cfg.steps, int)
    # the loader is PyYAML's safe one: a Python object tag is refused, not built
    import yaml

    from mobiedit import config_io

    assert issubclass(config_io._Loader, yaml.SafeLoader)
    y.write_text("lr: !!python/object/apply:os.system ['echo pwned']\n")
    with pytest.raises(ConfigError, match="cannot read YAML"):
        load_yaml(ROMEConfig, y)


@pytest.mark.parametrize("flags", [["--method", "rome"], ["--config", "x.yaml"], ["--layer", "1"], ["--out", "o"],
                                   ["--batch", "2"]])
def test_edit_bundle_refuses_flags_it_would_ignore(tmp_path, flags):
    r = subprocess.run([sys.executable, "-m", "mobiedit.cli", "--quiet", "edit", "--bundle", str(tmp_path / "b"),
                        "--subject", "Paris", "--prompt", "{} is in", "--target", "Rome", *flags],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and flags[0] in r.stderr and "does not apply to a bundle edit" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
