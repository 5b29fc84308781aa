"""The protecting write rules on the bundle path (issue 16: "the bundle must carry what the app
needs: … the key cache"): each bundle edit journals its key k̄, and under ``protect`` /
``rows-protect`` a later edit's direction is solved with the active edits' keys in the normal
matrix — the eager rules' arithmetic, from the shipped C⁻¹ by the Woodbury identity. Undoing an
edit drops its key from the cache; an entry recorded without a key is refused by name."""
from __future__ import annotations

import json
import shutil

import pytest
import torch

from mobiedit.editing.update import bundle_direction, protected_moment, protected_solve, rows_direction, solve_c
from mobiedit.errors import BundleError, JournalError
from mobiedit.requests import EditRequest

REQUESTS = [EditRequest(case_id="p1", prompt="{} professionally plays the sport", subject="David Robinson",
                        target_new="baseball", target_true="basketball"),
            EditRequest(case_id="p2", prompt="{} plays", subject="Ana Ivanovic",
                        target_new="chess", target_true="tennis")]


def _spd(g: torch.Generator, d: int) -> torch.Tensor:
    a = torch.randn(d, d, generator=g, dtype=torch.float64)
    return a @ a.T / d + 0.05 * torch.eye(d, dtype=torch.float64)


def test_the_woodbury_solve_is_the_eager_normal_matrix_solve():
    g = torch.Generator().manual_seed(1)
    c = _spd(g, 24)
    prior = torch.randn(5, 24, generator=g, dtype=torch.float64)
    x = torch.randn(24, 3, generator=g, dtype=torch.float64)
    for weight in (0.3, 1.0, 40.0):
        direct = torch.linalg.solve(protected_moment(c, list(prior), weight), x)
        assert torch.allclose(protected_solve(torch.linalg.inv(c), prior, weight, x), direct, rtol=1e-9, atol=1e-10)
    assert torch.allclose(protected_solve(torch.linalg.inv(c), None, 1.0, x), torch.linalg.solve(c, x))


def test_bundle_and_eager_protecting_directions_are_one_definition():
    """The bundle's ``rows-protect`` / ``protect`` directions (C⁻¹ shipped, Woodbury) equal the eager
    rules' (``protected_moment`` then a solve) on the same C, keys and applied keys (ridge 0)."""
    g = torch.Generator().manual_seed(2)
    c = _spd(g, 16).float()
    keys = torch.randn(16, generator=g) + 0.4 * torch.randn(4, 16, generator=g)
    prior = torch.randn(3, 16, generator=g)
    c_inv = torch.linalg.inv(c.double()).float()
    cp = protected_moment(c, list(prior), 2.0)
    eager_rows = rows_direction(cp, keys, 0.0, 1e-2)
    assert torch.allclose(bundle_direction(c_inv, keys, "rows-protect", 1e-2, prior, 2.0), eager_rows,
                          rtol=1e-4, atol=1e-5)
    eager_protect = solve_c(cp, keys.mean(0), 0.0)
    assert torch.allclose(bundle_direction(c_inv, keys, "protect", 1e-2, prior, 2.0), eager_protect,
                          rtol=1e-4, atol=1e-5)
    # no applied edit yet: ``protect`` is ROME's direction bit for bit, ``rows-protect`` is ``rows``
    assert torch.equal(bundle_direction(c_inv, keys, "protect", 1e-2, prior[:0]), c_inv @ keys.mean(0))
    assert torch.equal(bundle_direction(c_inv, keys, "rows-protect", 1e-2, None),
                       bundle_direction(c_inv, keys, "rows", 1e-2))
    # the applied keys change the direction: a later edit moves them less
    plain = bundle_direction(c_inv, keys, "rows", 1e-2)
    held = bundle_direction(c_inv, keys, "rows-protect", 1e-2, prior, 50.0)
    moved = lambda d: float((prior.double() @ d.double()).norm() / (keys[0].double() @ d.double()).abs())  # noqa: E731
    assert moved(held) < 0.5 * moved(plain)


def _bundle(base, tmp_path, rule: str):
    path = tmp_path / "bundle"
    shutil.copytree(base, path)
    m = json.loads((path / "manifest.json").read_text())
    m["edit"]["update"] = {"rule": rule, "rows_ridge": 1e-2, "edited_weight": 1.0}
    (path / "manifest.json").write_text(json.dumps(m))  # not a checksummed file
    return path


def _zo(b):
    from mobiedit.zo import ZOConfig

    return ZOConfig(estimator="fzoo", n_dirs=b.manifest["shapes"]["edit_K"] - 1, h=0.05, optimizer="adam",
                    lr=0.5, max_steps=2, max_evals=1000, check_every=1, seed=3)


def test_a_protecting_bundle_journals_keys_solves_against_them_and_drops_an_undone_one(kill_bundle_base, tmp_path):
    from mobiedit.export import load_bundle
    from mobiedit.export.ops import edit_bundle, undo_bundle_edit

    b = load_bundle(_bundle(kill_bundle_base, tmp_path, "rows-protect"))
    first, second = edit_bundle(b, REQUESTS, _zo(b), force=True, clamp_ladder=())
    journal = b.journal()
    k1, k2 = (journal.load_key(r.entry) for r in (first, second))
    assert k1.shape == (b.manifest["dims"]["intermediate_size"],) and not torch.equal(k1, k2)
    assert torch.equal(b.protected_keys(journal), torch.stack([k1, k2]))
    # the second edit was solved with the first's key held still: its recorded w is the
    # direction with K_p = [k1], normalised at its plain key, and not the unprotected one
    _, w2 = journal.load_factors(second.entry)
    c_inv = b.keystats()["c_inv"]
    rows_keys = _rewrite_keys(b, REQUESTS[1])
    gap = {}
    for name, prior in (("protected", k1[None]), ("unprotected", None)):
        d = bundle_direction(c_inv, rows_keys, "rows-protect", 1e-2, prior, 1.0).double()
        w = d / (rows_keys[0].double() @ d)
        gap[name] = float((w - w2.double()).norm() / w2.double().norm())
    assert gap["protected"] < 1e-5 and gap["unprotected"] > 1e-3, gap
    undo_bundle_edit(b, first.entry.id)
    assert torch.equal(b.protected_keys(b.journal()), k2[None])


def _rewrite_keys(b, req):
    from mobiedit.editing.config import ObjectiveConfig
    from mobiedit.editing.context import build_edit_inputs
    from mobiedit.export.packing import pack_edit
    from mobiedit.export.verify import edit_shapes_of

    m = b.manifest
    objective = ObjectiveConfig(**m["edit"]["objective"])
    packed = pack_edit(build_edit_inputs(b.tokenizer(), req, m["edit"]["templates"], objective),
                       edit_shapes_of(m), objective)
    slot_u, slot_w = b.slots()
    return b.program("prefix").run({**packed.prefix_feed, "slot_u": slot_u, "slot_w": slot_w})["keys"][: packed.n_rewrite]


def test_an_entry_without_its_key_is_refused_by_a_protecting_bundle_and_a_bad_key_by_the_journal(
        kill_bundle_base, tmp_path):
    from mobiedit.export import load_bundle
    from mobiedit.export.ops import edit_bundle

    b = load_bundle(_bundle(kill_bundle_base, tmp_path, "protect"))
    ks, m = b.keystats(), b.manifest
    d_in, d_out = m["dims"]["intermediate_size"], m["dims"]["d_out"]
    journal = b.journal()
    with pytest.raises(JournalError) as e:
        journal.record(REQUESTS[0], "mobiedit-bundle", m["model_family"], m["edit_layer"], m["edit_module"],
                       torch.zeros(d_out), torch.zeros(d_in), ks["base_weight"], key=torch.zeros(d_in + 1))
    assert e.value.where == "record(), argument 'key'"
    entry = journal.record(REQUESTS[0], "mobiedit-bundle", m["model_family"], m["edit_layer"], m["edit_module"],
                           torch.zeros(d_out), torch.zeros(d_in), ks["base_weight"])  # no key: an older entry
    assert journal.load_key(entry) is None
    with pytest.raises(BundleError) as e:
        edit_bundle(b, REQUESTS[1:], _zo(b), force=True, clamp_ladder=())
    assert f"edit {entry.id} was recorded without its key" in e.value.message
    assert "undo" in e.value.fix


def test_the_exporter_writes_edited_weight_for_the_protecting_rules_only():
    from mobiedit.export.bundle import _update_section
    from mobiedit.export.config import EditSetup, ExportConfig
    from mobiedit.export.manifest_check import update_of

    sec = _update_section(ExportConfig(edit=EditSetup(update_rule="rows-protect", edited_weight=3.0)))
    assert sec == {"rule": "rows-protect", "rows_ridge": 1e-2, "edited_weight": 3.0}
    assert update_of({"edit": {"update": sec}}) == ("rows-protect", 1e-2, 3.0)
    assert _update_section(ExportConfig(edit=EditSetup(update_rule="rows"))) == {"rule": "rows", "rows_ridge": 1e-2}
