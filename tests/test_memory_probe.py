"""tools/probes/memory_directions.py's slope table: exact slopes on a linear loss, the whole-gradient
scale of its block mode, and the patch reaching the loop (and a spawned bench row through
tools/probes/patch_site) only where it is asked for."""
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mobiedit.zo import loop as zo_loop
from mobiedit.zo.estimators import FzooEstimator
from tools.probes import memory_directions as mem

ROOT = Path(__file__).resolve().parents[1]


def _linear(g: np.ndarray):
    return lambda D: (D.astype(np.float64) @ g).astype(np.float32)


def _cycle(est, g, x):
    """Run one cycle of d / n steps at a fixed x; return the estimates and the last one."""
    forward, out = _linear(g), []
    for step in range(est.d // est.n):
        D = est.propose(x, step)
        out.append(est.estimate(x, step, D, forward(D))[0].astype(np.float64))
    return out


def test_the_table_holds_each_coordinates_slope_after_a_cycle():
    g = np.random.default_rng(0).standard_normal(32)
    est = mem.MemoryEstimator(4, 0.05, 7, 32, "coordinates")
    _cycle(est, g, np.zeros(32, np.float32))
    assert est.seen.all()
    np.testing.assert_allclose(est.table, g, rtol=2e-3, atol=2e-4)  # float32 losses


def _mode_cycle(monkeypatch, block: bool, warm: bool, n: int, d: int, seed: int):
    """(g, estimator, the estimates of one cycle from a fresh table) in the given mode."""
    monkeypatch.setattr(mem, "BLOCK", block)
    monkeypatch.setattr(mem, "WARM", warm)
    g = np.random.default_rng(seed).standard_normal(d)
    est = mem.MemoryEstimator(n, 0.05, seed, d, "coordinates")
    return g, est, _cycle(est, g, np.zeros(d, np.float32))


def test_block_steps_add_up_to_one_normalised_gradient_step_per_cycle(monkeypatch):
    g, _, steps = _mode_cycle(monkeypatch, True, False, 6, 48, 1)
    for s in steps:
        assert np.count_nonzero(s) == 6  # each step moves its own block only
    # once the table is full, the blocks of a cycle sum to sqrt(d)·g/‖g‖
    est2 = mem.MemoryEstimator(6, 0.05, 3, 48, "coordinates")
    est2.table[:], est2.seen[:] = g, True
    total = sum(_cycle(est2, g, np.zeros(48, np.float32)))
    np.testing.assert_allclose(total, math.sqrt(48) * g / np.linalg.norm(g), rtol=5e-3, atol=5e-3)


def test_warm_mode_holds_the_delta_until_the_table_is_full(monkeypatch):
    _, _, steps = _mode_cycle(monkeypatch, False, True, 4, 16, 2)
    assert all(not s.any() for s in steps[:-1]) and steps[-1].any()
    np.testing.assert_allclose(np.linalg.norm(steps[-1]), 4.0, rtol=1e-5)  # sqrt(d)·sqrt(f), f = 1


def test_the_patch_takes_only_python_fzoo_runs_on_coordinates():
    assert isinstance(mem.make_estimator("fzoo", 4, 0.05, 0, 16, "coordinates"), mem.MemoryEstimator)
    iid = mem.make_estimator("fzoo", 4, 0.05, 0, 16, "iid")
    assert isinstance(iid, FzooEstimator) and not isinstance(iid, mem.MemoryEstimator)
    assert zo_loop.make_estimator is not mem.make_estimator  # importing the probe patches nothing


@pytest.mark.parametrize("flag,patched", [("1", True), ("0", False)])
def test_patch_site_patches_a_fresh_interpreter_only_when_asked(flag, patched):
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tools" / "probes" / "patch_site"), "MEMORY_PROBE": flag}
    code = ("from mobiedit.zo import loop; from tools.probes import memory_directions as m; "
            "print(loop.make_estimator is m.make_estimator)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == str(patched)


def test_a_patched_bench_log_is_refused_by_a_plain_run_and_resumed_by_a_patched_one(tmp_path):
    log = tmp_path / "row.jsonl"
    code = ("import sys; from mobiedit.rowlog import RowLog; from mobiedit.errors import ConfigError\n"
            "try:\n    RowLog(sys.argv[1], {'row': 'fzoo-stopw'}); print('ok')\n"
            "except ConfigError as e:\n    print('refused', e)")
    runs = {}
    for name, flag in (("patched", "1"), ("plain", "0"), ("again", "1")):
        env = {**os.environ, "PYTHONPATH": str(ROOT / "tools" / "probes" / "patch_site"), "MEMORY_PROBE": flag,
               "MEMORY_BLOCK": "1"}
        runs[name] = subprocess.run([sys.executable, "-c", code, str(log)], cwd=ROOT, env=env,
                                    capture_output=True, text=True, check=True).stdout
    assert runs["patched"].startswith("ok") and runs["again"].startswith("ok")
    assert runs["plain"].startswith("refused") and "probe" in runs["plain"]
    assert "MEMORY_BLOCK=1" in log.read_text().splitlines()[0]
