"""``mobiedit bench-bundle-sequential`` (export/bench_sequential.py, export/scoring.py) on the tiny llama's small fp32
ONNX bundle (conftest ``kill_bundle_base``, 8 slots): the scorer against the HF model's
teacher-forced logits, a 3-edit run (JSON rows, the user's bundle untouched, undo restoring the
unedited bundle), the slots error, and an undo check that notices an undo that did not happen."""
from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
import torch

from mobiedit.cli import main
from mobiedit.requests import bundled_path, load_requests

REQUESTS = bundled_path("counterfact-edit-1k.json")


def _tree(folder: Path) -> dict[str, tuple[str, int]]:
    """Relative path -> (sha256, mtime_ns) of every file under ``folder`` (journal included)."""
    return {str(p.relative_to(folder)): (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_mtime_ns)
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def fitting(kill_bundle_base, tmp_path_factory) -> Path:
    """A request file of the first 8 bundled requests the small bundle can edit and score (its edit
    shapes and 48 positions are smaller than the bundled requests need)."""
    from mobiedit.errors import MobiEditError
    from mobiedit.export.bench_sequential import check_bundle
    from mobiedit.export.bundle import load_bundle
    from mobiedit.requests import save_requests

    b, kept = load_bundle(kill_bundle_base), []
    for r in load_requests(REQUESTS)[:200]:
        try:
            check_bundle(b, [r], [r])
        except MobiEditError:
            continue
        kept.append(r)
        if len(kept) == 8:
            break
    path = tmp_path_factory.mktemp("bseq_requests") / "requests.json"
    save_requests(path, kept)
    return path


@pytest.fixture
def user_bundle(kill_bundle_base, tmp_path) -> Path:
    """A private copy of the session bundle, standing for the user's bundle folder."""
    return Path(shutil.copytree(kill_bundle_base, tmp_path / "user_bundle"))


def test_scorer_gives_the_hf_models_teacher_forced_logits(tiny_llama_dir, kill_bundle_base):
    """BundleScorer through prefill + decode (empty slots) = the HF model's logits at the positions
    that predict each target token (mobiedit.prompts' tokenisation), and its accuracy counts them."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from mobiedit.export.scoring import BundleScorer
    from mobiedit.export.bundle import load_bundle
    from mobiedit.prompts import prompt_ids, target_ids

    model = AutoModelForCausalLM.from_pretrained(tiny_llama_dir, dtype=torch.float32).eval()
    tok = AutoTokenizer.from_pretrained(tiny_llama_dir)
    sc = BundleScorer(load_bundle(kill_bundle_base))
    assert sc.slots_empty()
    checked = 0
    for r in load_requests(REQUESTS)[:4]:
        for prompt, target in ((r.rewrite_prompt, r.target_new), (r.neighborhood_prompts[0], r.neighborhood_answers[0])):
            pid, tid = prompt_ids(tok, prompt), target_ids(tok, target)
            with torch.no_grad():
                want = model(input_ids=torch.tensor([pid + tid[:-1]])).logits[0, len(pid) - 1:]
            got = sc.score(prompt, target)
            assert got.targets == tid and got.logits.shape == want.shape
            torch.testing.assert_close(got.logits, want, atol=1e-4, rtol=1e-4)
            assert got.acc() == sum(int(a == t) for a, t in zip(want.argmax(-1).tolist(), tid)) / len(tid)
            checked += len(tid)
    assert checked > 8  # multi-token targets went through decode


def test_three_edits_write_rows_leave_the_users_bundle_alone_and_undo_restores(user_bundle, fitting, tmp_path,
                                                                              capsys):
    before = _tree(user_bundle)
    out = tmp_path / "out"
    rc = main(["--quiet", "bench-bundle-sequential", "--bundle", str(user_bundle), "--requests", str(fitting),
               "--n", "3", "--checkpoints", "1", "3", "--probe", "3", "--force", "--out", str(out)])
    printed = capsys.readouterr().out
    assert rc == 0, printed
    assert _tree(user_bundle) == before  # journal included: nothing written into the user's folder
    res = json.loads((out / "bundle_sequential.json").read_text())
    assert (out / "bundle_sequential.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    reqs = load_requests(fitting)
    assert [e["case_id"] for e in res["edits"]] == [r.case_id for r in reqs[:3]]
    assert all(e["applied"] for e in res["edits"]) and [e["edit_id"] for e in res["edits"]] == [1, 2, 3]
    assert all(e["loss_evals"] > 0 and e["wall_s"] > 0 for e in res["edits"])
    assert [r["edits"] for r in res["table"]] == [1, 3] and [r["applied"] for r in res["table"]] == [1, 3]
    assert res["unedited"]["edits"] == 0 and res["unedited"]["locality_acc"] == 100.0
    assert res["unedited"]["probe_locality_acc"] == 100.0  # the reference of locality is the unedited bundle
    for row in res["table"]:
        for key in ("efficacy_acc", "efficacy_exact", "generalization_acc", "locality_acc", "probe_locality_acc",
                    "probe_true_acc", "retention_applied_acc"):
            assert 0.0 <= row[key] <= 100.0, (key, row)
        assert row["retention_applied_acc"] == row["efficacy_acc"]  # every edit applied (--force)
    assert res["slots"] == 8 and res["n"] == 3 and res["probe"] == 3 and res["source_active_edits"] == 0
    assert res["update"] == {"rule": "protect", "rows_ridge": 0.01, "edited_weight": 1.0}  # the bundle's write rule (manifest edit.update)
    assert res["undo"] == {"undone": 3, "slots_empty": True, "probe_passes": res["undo"]["probe_passes"],
                           "probe_logits_bit_exact": True, "edited_neighbours_unchanged": True,
                           "restores_unedited": True}
    assert res["undo"]["probe_passes"] >= 6  # 3 true answers + 3 neighbours
    lines = printed.splitlines()
    assert lines[0].split()[:2] == ["edits", "applied"] and [ln.split()[0] for ln in lines[1:4]] == ["0", "1", "3"]
    assert "-> ok" in printed


def test_more_edits_than_slots_or_unfitting_requests_fail_before_any_edit(user_bundle, tmp_path, capsys):
    before = _tree(user_bundle)
    rc = main(["--quiet", "bench-bundle-sequential", "--bundle", str(user_bundle), "--n", "9",
               "--work", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--n" in err and "has 8" in err and "--slots 9" in err
    # the bundled requests 2 and 3 need longer edit shapes than this small bundle's
    rc = main(["--quiet", "bench-bundle-sequential", "--bundle", str(user_bundle), "--n", "3",
               "--work", str(tmp_path / "work")])
    err = capsys.readouterr().err
    assert rc == 2 and "--requests" in err and "--fit-requests" in err
    assert not (tmp_path / "work").exists() and _tree(user_bundle) == before


def test_out_or_work_inside_the_bundle_is_refused(user_bundle, capsys):
    for flag in ("--out", "--work"):
        rc = main(["--quiet", "bench-bundle-sequential", "--bundle", str(user_bundle), "--n", "1",
                   flag, str(user_bundle / "runs")])
        assert rc == 2 and flag in capsys.readouterr().err
    assert not (user_bundle / "runs").exists()


def test_the_undo_check_notices_an_undo_that_did_not_happen(user_bundle, fitting, tmp_path, monkeypatch, capsys):
    """With undo_bundle_edit replaced by a no-op the edit stays in its slot: the check fails, exit 1."""
    import mobiedit.export.ops as ops

    monkeypatch.setattr(ops, "undo_bundle_edit", lambda bundle, edit_id, *a, **k: None)
    work = tmp_path / "work"
    rc = main(["--quiet", "bench-bundle-sequential", "--bundle", str(user_bundle), "--requests", str(fitting),
               "--n", "1", "--checkpoints", "1", "--probe", "3", "--force", "--work", str(work)])
    assert rc == 1
    assert "FAILED" in capsys.readouterr().out
    assert len(list((work / "bundle" / "journal").glob("edit-*.safetensors"))) >= 1  # --work keeps the edited copy
