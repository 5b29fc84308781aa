"""The ``rows`` write on the bundle path (manifest ``edit.update``, docs/bundle_format.md): the
exporter writes the rule, readers refuse a malformed one naming the field, and a bundle edit under
``rows`` writes the searched delta at every rewrite row's key (``w·k_i ≈ 1``), where ROME's
direction is exact at the plain prompt's key only. One definition: the eager path's
``rows_direction`` and the bundle's ``bundle_direction`` agree on the same C and keys."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from mobiedit.editing.context import build_edit_inputs
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.update import bundle_direction, rows_direction
from mobiedit.errors import BundleError, ConfigError
from mobiedit.requests import EditRequest

REQUEST = EditRequest(case_id="t1", prompt="{} professionally plays the sport", subject="David Robinson",
                      target_new="baseball", target_true="basketball")


def _bundle(base, tmp_path, update: dict | None):
    """A copy of the session's small bundle with ``edit.update`` set (None: removed, an older bundle)."""
    path = tmp_path / "bundle"
    shutil.copytree(base, path)
    m = json.loads((path / "manifest.json").read_text())
    assert m["edit"]["update"] == {"rule": "protect", "rows_ridge": 0.01, "edited_weight": 1.0}  # the exporter's default
    if update is None:
        del m["edit"]["update"]
    else:
        m["edit"]["update"] = update
    (path / "manifest.json").write_text(json.dumps(m))  # not a checksummed file
    return path


def _rewrite_keys(b, journal):
    from mobiedit.export.packing import pack_edit
    from mobiedit.export.verify import edit_shapes_of

    m = b.manifest
    objective = ObjectiveConfig(**m["edit"]["objective"])
    packed = pack_edit(build_edit_inputs(b.tokenizer(), REQUEST, m["edit"]["templates"], objective),
                       edit_shapes_of(m), objective)
    slot_u, slot_w = b.slots(journal)
    keys = b.program("prefix").run({**packed.prefix_feed, "slot_u": slot_u, "slot_w": slot_w})["keys"]
    return keys[: packed.n_rewrite]


def test_a_rows_bundle_writes_the_searched_delta_at_every_rewrite_key(kill_bundle_base, tmp_path):
    from mobiedit.export import load_bundle
    from mobiedit.export.ops import search_bundle_edit
    from mobiedit.zo import ZOConfig

    gaps = {}
    for rule, update in (("rome", None), ("rows", {"rule": "rows", "rows_ridge": 1e-6})):
        b = load_bundle(_bundle(kill_bundle_base, tmp_path / rule, update))
        zo = ZOConfig(estimator="fzoo", n_dirs=b.manifest["shapes"]["edit_K"] - 1, h=0.05, optimizer="adam",
                      lr=0.5, max_steps=2, max_evals=1000, check_every=1, seed=3)
        found = search_bundle_edit(b, b.journal(), b.keystats(), REQUEST, zo, verify_write=False)
        keys = _rewrite_keys(b, b.journal())
        assert keys.shape[0] >= 3  # the plain prompt and the context templates' rows
        gains = keys.double() @ torch.as_tensor(found.w).double()
        assert abs(float(gains[0]) - 1) < 1e-4  # either rule: exact at the plain prompt
        gaps[rule] = float((gains - 1).abs().max())
    assert gaps["rows"] < 1e-3 < gaps["rome"], gaps


def test_eager_and_bundle_rows_directions_are_one_definition():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(16, 16, generator=g, dtype=torch.float64)
    c = (a @ a.T / 16 + 0.05 * torch.eye(16, dtype=torch.float64)).float()
    keys = torch.randn(16, generator=g) + 0.4 * torch.randn(5, 16, generator=g)
    c_inv = torch.linalg.inv(c.double()).float()
    eager = rows_direction(c, keys, 0.0, 1e-2)
    assert torch.allclose(bundle_direction(c_inv, keys, "rows", 1e-2), eager, rtol=1e-4, atol=1e-5)
    assert torch.equal(bundle_direction(c_inv, keys), c_inv @ keys.mean(0))  # ROME's, as bundles always wrote


@pytest.mark.parametrize("update, field", [({"rule": "nullspace"}, "edit.update.rule"),
                                           ({"rule": "rows-protect", "edited_weight": 0}, "edit.update.edited_weight"),
                                           ({"rule": "protect", "edited_weight": -1},
                                            "edit.update.edited_weight"),
                                           ({"rule": "rows", "rows_ridge": 0}, "edit.update.rows_ridge"),
                                           ({"rule": "rows", "rows_ridge": True}, "edit.update.rows_ridge"),
                                           ({"rule": "rows", "extra": 1}, "edit.update.extra"),
                                           ([], "edit.update")])
def test_a_malformed_update_section_is_refused_naming_the_field(kill_bundle_base, tmp_path, update, field):
    from mobiedit.export import load_bundle

    with pytest.raises(BundleError) as e:
        load_bundle(_bundle(kill_bundle_base, tmp_path, update))
    assert f"field '{field}'" in str(e.value)


def test_an_older_bundle_without_the_section_writes_rome_and_the_export_config_checks_the_rule(
        kill_bundle_base, tmp_path):
    from mobiedit.export import load_bundle
    from mobiedit.export.manifest_check import update_of
    from mobiedit.export.config import EditSetup

    assert update_of(load_bundle(_bundle(kill_bundle_base, tmp_path, None)).manifest) == ("rome", 1e-2, 1.0)
    for kw, where in (({"update_rule": "nullspace"}, "ExportConfig.edit.update_rule"),
                      ({"update_rule": "rows-protect", "edited_weight": 0}, "ExportConfig.edit.edited_weight"),
                      ({"update_rule": "rows", "rows_ridge": float("nan")}, "ExportConfig.edit.rows_ridge")):
        with pytest.raises(ConfigError) as e:
            EditSetup(**kw)
        assert e.value.where == where
