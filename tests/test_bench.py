"""``mobiedit bench`` / ``bench-prefix``: row specs, per-row request counts, JSON + PNG output,
and the prefix FLOP model (figures themselves live in docs/results.md, not in asserts)."""
from __future__ import annotations

import dataclasses
import os
import json

import pytest
import torch

from mobiedit.bench import ROWS, parse_rows, row_config, tune_rows
from mobiedit.bench_rows import parse_sets, tuned_paper_lr
from mobiedit.cli import main
from mobiedit.errors import ConfigError


def test_every_row_is_a_valid_config():
    for name in ROWS:
        cfg = row_config(name, 2, seed=3)
        assert cfg.layer == 2
    assert row_config("fzoo-noprefix", 1, 0).prefix_reuse is False
    assert row_config("fzoo-noearly", 1, 0).early_stop is False
    assert row_config("fzoo-float", 1, 0).quant.scheme == "none"
    assert row_config("paper", 1, 0).zo.loss_tol == pytest.approx(1e-5)
    assert row_config("paper-check", 1, 0).early_stop is True
    fast, ship = row_config("fzoo-lr2", 1, 0), row_config("fzoo", 1, 0)
    assert fast.zo.lr == 2.0 and dataclasses.replace(fast.zo, lr=ship.zo.lr) == ship.zo  # only the lr differs
    fast16, ship16 = row_config("fzoo-lr2-bf16", 1, 0), row_config("fzoo-bf16", 1, 0)
    assert fast16.zo == fast.zo and fast16.quant == ship16.quant and fast16.quant.scheme == "bf16"


def test_row_spec_parsing_and_errors():
    assert [(r.name, r.n, r.sets) for r in parse_rows("rome, fzoo ,paper:30", 200)] == \
        [("rome", 200, ()), ("fzoo", 200, ()), ("paper", 30, ())]
    for bad, field in (("nope", "unknown bench row"), ("fzoo:x", "bad request count"), ("fzoo:0", ">= 1"), (",", "no rows")):
        with pytest.raises(ConfigError, match=field):
            parse_rows(bad, 10)


def test_settings_go_over_every_row_or_the_one_named():
    sets = parse_sets(["update.written_gain=true", "fzoo:zo.lr=0.3", "context.lengths=[[5, 2]]"])
    rows = parse_rows("rome,fzoo", 10, sets)
    assert rows[0].sets == (("update.written_gain", True), ("context.lengths", [[5, 2]]))
    assert rows[1].sets == (("update.written_gain", True), ("zo.lr", 0.3), ("context.lengths", [[5, 2]]))
    rome, fz = (row_config(r.name, 1, 0, r.sets) for r in rows)
    assert rome.update.written_gain and fz.update.written_gain and fz.zo.lr == 0.3
    assert rome.context.lengths == ((5, 2),) and row_config("fzoo", 1, 0).zo.lr != 0.3
    assert rows[1].label == 'fzoo update.written_gain=true zo.lr=0.3 context.lengths=[[5, 2]]'
    assert rows[0].stem != rows[1].stem != "row-fzoo" and parse_rows("fzoo", 1)[0].stem == "row-fzoo"
    for bad, msg in ((["novalue"], "bad setting"), (["x:zo.lr=1"], "unknown row"), (["zo..lr=1"], "bad setting"),
                     (["fzoo:layer=3"], "the bench's")):  # was replaced by the bench's layer silently
        with pytest.raises(ConfigError, match=msg):
            parse_sets(bad)
    with pytest.raises(ConfigError, match="zo") as e:  # ROME has no zo: named, not ignored
        row_config("rome", 1, 0, (("zo.lr", 0.3),))
    assert "row rome" in str(e.value)
    with pytest.raises(ConfigError, match="written_gainn"):
        row_config("fzoo", 1, 0, (("update.written_gainn", True),))


def test_paper_tuned_takes_the_sweeps_best_lr_from_other_requests(tmp_path):
    sweep = {"case_ids": ["a", "b"], "rows": [
        {"row": "paper-lr0.2", "success_rate": 50.0, "loss_evals_mean": 3000},
        {"row": "paper-lr0.8", "success_rate": 100.0, "loss_evals_mean": 2500},
        {"row": "paper-lr1.6", "success_rate": 100.0, "loss_evals_mean": 2000},
        {"row": "fzoo", "success_rate": 100.0, "loss_evals_mean": 500}]}
    (tmp_path / "bench.json").write_text(json.dumps(sweep))
    lr, table = tuned_paper_lr(tmp_path, ["c", "d"])
    assert lr == 1.6 and set(table) == {"paper-lr0.2", "paper-lr0.8", "paper-lr1.6"}
    rows, info = tune_rows(parse_rows("rome,paper-tuned,paper-tuned-c20", 5), tmp_path, ["c", "d"])
    assert rows[0].sets == () and rows[1].sets == (("zo.lr", 1.6),) and info["lr"] == 1.6
    cfg = row_config("paper-tuned-c20", 1, 0, rows[2].sets)
    assert cfg.zo.lr == 1.6 and cfg.zo.check_every == 20 and cfg.zo.max_steps == 600 and cfg.zo.estimator == "paper"
    with pytest.raises(ConfigError, match="overlap"):
        tuned_paper_lr(tmp_path, ["b", "z"])
    with pytest.raises(ConfigError, match="--tuned-from"):
        tune_rows(parse_rows("paper-tuned", 5), None, ["c"])
    assert tune_rows(parse_rows("fzoo", 5), None, ["c"]) == (parse_rows("fzoo", 5), None)


def test_bench_writes_json_and_png_with_per_row_counts(tiny_llama_dir, tmp_path, capsys):
    out = tmp_path / "b"
    rc = main(["bench", "--model", str(tiny_llama_dir), "--layer", "0", "--rows", "rome:1,fzoo:2", "--n", "5",
               "--jobs", "2", "--out", str(out)])  # both rows at once: the table keeps the rows' order
    assert rc == 0
    res = json.loads((out / "bench.json").read_text())
    assert [(r["row"], r["n"]) for r in res["rows"]] == [("rome", 1), ("fzoo", 2)]
    fz = res["rows"][1]
    assert len(fz["loss_evals_per_edit"]) == 2 and fz["backward_calls_mean"] == 0
    assert res["rows"][0]["backward_calls_mean"] > 0
    assert (out / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "fzoo" in capsys.readouterr().out
    # a rerun resumes each row's per-request log: rome's request is not edited again, fzoo adds one
    rc = main(["bench", "--model", str(tiny_llama_dir), "--layer", "0", "--rows", "rome:1,fzoo:3", "--n", "5",
               "--out", str(out)])
    again = json.loads((out / "bench.json").read_text())["rows"]
    assert rc == 0 and [(r["row"], r["n"], r["processes"]) for r in again] == [("rome", 1, 1), ("fzoo", 3, 2)]
    assert again[1]["loss_evals_per_edit"][:2] == fz["loss_evals_per_edit"]
    assert again[0]["quality"] == res["rows"][0]["quality"]
    capsys.readouterr()
    rc = main(["bench", "--model", str(tiny_llama_dir), "--layer", "0", "--rows", "rome:1", "--seed", "3",
               "--out", str(out)])  # another seed is another experiment: refused before any edit
    err = capsys.readouterr().err
    assert rc == 2 and "row-rome-L0.jsonl holds results of another run (different" in err and "seed" in err, err


def test_bench_reports_both_localities_fluency_and_perplexity(small_fact_lm, tmp_path, capsys):
    """The field's columns on the fact LM: probability convention, locality unchanged-vs-unedited
    and vs the ground truth, fluency and held-out perplexity before/after — in the table and JSON."""
    out = tmp_path / "b"
    rc = main(["bench", "--model", str(small_fact_lm), "--rows", "rome:2", "--out", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert all(col in text for col in ("locU", "locT", "flu pre>post", "ppl%"))
    q = json.loads((out / "bench.json").read_text())["rows"][0]["quality"]
    for k in ("efficacy_prob", "generalization_prob", "locality_unchanged", "locality_truth"):
        assert 0.0 <= q[k] <= 100.0, k
    assert q["fluency_pre"] > 0 and q["fluency"] > 0
    assert q["perplexity_pre"] > 1 and q["perplexity"] > 1
    assert q["perplexity_change_pct"] == pytest.approx(100 * (q["perplexity"] / q["perplexity_pre"] - 1), abs=1e-6)
    assert q["perplexity"] != q["perplexity_pre"]  # the edit of the layer is seen by the probe
    rc = main(["bench", "--model", str(small_fact_lm), "--rows", "rome:1", "--no-ability", "--out", str(tmp_path / "c")])
    q = json.loads((tmp_path / "c" / "bench.json").read_text())["rows"][0]["quality"]
    assert rc == 0 and q["fluency_pre"] != q["fluency_pre"]  # NaN: not measured


def test_prefix_flop_model_counts_only_the_suffix(tiny_llama_dir):
    """The theoretical ratio grows with the share of work below the edit layer and before the
    subject: editing layer 0 leaves more to recompute than editing the last layer."""
    from mobiedit.bench_prefix import measure

    torch.set_num_threads(1)
    lo = measure(str(tiny_llama_dir), 0, 1, K=2, reps=1, quant="none")
    hi = measure(str(tiny_llama_dir), 1, 1, K=2, reps=1, quant="none")
    for r in (lo, hi):
        m = r["per_request"][0]
        assert m["flops_full"] > m["flops_prefix"] > 0 and m["t_full_s"] > 0 and m["t_prefix_s"] > 0
    assert hi["median"]["flop_ratio"] > lo["median"]["flop_ratio"] > 1.0


def _child_peak(q) -> None:
    from mobiedit.rss import peak_rss_mb

    q.put(peak_rss_mb())


def test_peak_rss_is_the_childs_own_not_the_parents():
    """ru_maxrss would carry the parent's high-water mark into a spawned child."""
    import multiprocessing as mp

    from mobiedit.rss import peak_rss_mb

    big = bytearray(400 * 2**20)  # touch 400 MiB in the parent
    for i in range(0, len(big), 4096):
        big[i] = 1
    parent = peak_rss_mb()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=_child_peak, args=(q,))
    p.start(); child = q.get(timeout=120); p.join()
    del big
    assert parent >= 400 and 0 < child < parent - 300


def test_a_row_log_from_before_a_new_config_field_resumes_at_its_default(tmp_path):
    """A field added to a config (e.g. ``update.clamp_ladder``) must not orphan row logs written
    before it, when the row leaves it at its default; any other difference is still refused."""
    from mobiedit.errors import ConfigError
    from mobiedit.rowlog import RowLog, same_identity

    old = {"row": "rome", "seed": 0, "config": {"lr": 0.5, "update": {"rule": "rome"}}}
    defaults = {"config": {"lr": 0.5, "update": {"rule": "rome", "clamp_ladder": []}}}
    new = {"row": "rome", "seed": 0, "config": {"lr": 0.5, "update": {"rule": "rome", "clamp_ladder": []}}}
    assert same_identity(old, new, defaults)
    assert not same_identity(old, {**new, "config": {"lr": 0.5, "update": {"rule": "rome", "clamp_ladder": [2]}}},
                             defaults)  # the new field set: another experiment
    assert not same_identity(old, new, {})  # no defaults known: a difference
    assert not same_identity(new, old, defaults)  # a field the new code dropped: a difference
    assert not same_identity(old, {**new, "seed": 1}, defaults)
    path = tmp_path / "row-rome-L0.jsonl"
    RowLog(path, old)
    RowLog(path, new, defaults)  # resumes
    with pytest.raises(ConfigError, match="different config"):
        RowLog(path, {**new, "config": {"lr": 0.1, "update": {"rule": "rome", "clamp_ladder": []}}}, defaults)


def test_a_log_from_before_stop_on_reads_as_the_loop_rule_it_ran_with(tmp_path):
    """``stop_on``'s default changed ("loop" -> "written", session 17): a row log that predates the
    field ran with the loop's rule, so it resumes a ``stop_on: loop`` row and is refused by today's
    default row (``fzoo``), whose results it would otherwise be mixed into."""
    from mobiedit.bench import identity_defaults, row_identity
    from mobiedit.bench_rows import RowSpec, row_config
    from mobiedit.config_io import to_dict
    from mobiedit.errors import ConfigError
    from mobiedit.rowlog import RowLog

    shipped = row_config("fzoo", 1, 0, (), None)
    assert shipped.stop_on == "written" and row_config("fzoo-loop", 1, 0, (), None).stop_on == "loop"
    assert identity_defaults(shipped)["config"]["stop_on"] == "loop"
    req = tmp_path / "r.json"
    req.write_text("[]")
    ident = {name: row_identity(RowSpec(name, 1), str(tmp_path), str(req), 1, 0, False) for name in ("fzoo", "fzoo-loop")}
    old = {**ident["fzoo-loop"], "config": {k: v for k, v in ident["fzoo-loop"]["config"].items() if k != "stop_on"}}
    RowLog(tmp_path / "a.jsonl", old)
    RowLog(tmp_path / "a.jsonl", ident["fzoo-loop"], identity_defaults(shipped))  # resumes
    old_shipped = {**old, "row": "fzoo"}
    RowLog(tmp_path / "b.jsonl", old_shipped)
    with pytest.raises(ConfigError, match="different config"):
        RowLog(tmp_path / "b.jsonl", ident["fzoo"], identity_defaults(shipped))
    assert to_dict(shipped)["stop_on"] == "written"


def test_a_log_from_before_reuse_checked_reads_as_scoring_every_point_again(tmp_path):
    """``reuse_checked`` (session 36, on): a row log that predates it ran without it (every checked point
    scored again), so today's row refuses to resume it — its evaluation counts would mix — and the row
    with ``reuse_checked=false`` resumes it."""
    from mobiedit.bench import identity_defaults, row_identity
    from mobiedit.bench_rows import RowSpec, row_config
    from mobiedit.errors import ConfigError
    from mobiedit.rowlog import RowLog

    shipped = row_config("fzoo-stopw", 1, 0, (), None)
    assert shipped.reuse_checked and identity_defaults(shipped)["config"]["reuse_checked"] is False
    req = tmp_path / "r.json"
    req.write_text("[]")
    off = RowSpec("fzoo-stopw", 1, (("reuse_checked", False),))
    now, before = (row_identity(s, str(tmp_path), str(req), 1, 0, False) for s in (RowSpec("fzoo-stopw", 1), off))
    old = {**now, "config": {k: v for k, v in now["config"].items() if k != "reuse_checked"}}
    RowLog(tmp_path / "a.jsonl", old)
    with pytest.raises(ConfigError, match="different config"):
        RowLog(tmp_path / "a.jsonl", now, identity_defaults(shipped))
    RowLog(tmp_path / "a.jsonl", {**before, "row": "fzoo-stopw"}, identity_defaults(shipped))  # resumes


def test_a_clamp_ladder_counts_every_rungs_written_checks():
    """``written_checks`` / ``written_refused`` of a laddered edit are summed over its rungs, the
    bundle path's convention (export.ops.climb_bundle_edit), not the last rung's."""
    import torch

    from mobiedit.methods.common import EditOutcome
    from mobiedit.session import _with_costs_of

    def rung(checks: int, refused: int) -> EditOutcome:
        return EditOutcome(method="mobiedit", layer=0, module="m", u=torch.zeros(1), w=torch.zeros(1), succeeded=False,
                           status="MAX_STEPS", loss_evals=10, sequences=20, forward_calls=3, backward_calls=0,
                           wall_time=1.0, losses=[1.0],
                           config={"stop_on": "written", "written_checks": checks, "written_refused": refused})

    total = _with_costs_of(rung(1, 0), rung(3, 3))
    assert total.config == {"stop_on": "written", "written_checks": 4, "written_refused": 3} and total.loss_evals == 20


def test_row_summary_reports_quality_over_the_applied_edits_alone(tmp_path):
    """``quality_applied``: the aggregate over the edits that succeeded (a session writes no
    failed edit unless forced), beside the all-edits ``quality``; the table prints its ppl%."""
    from mobiedit.bench_report import format_rows
    from mobiedit.evaluate import RequestScores
    from mobiedit.rowlog import RowLog

    log = RowLog(tmp_path / "row-x-L0.jsonl", {"row": "x"})
    for i, (ok, ppl) in enumerate([(True, 10.1), (False, 40.0), (True, 10.3)]):
        s = RequestScores(f"c{i}", 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, perplexity_pre=10.0, perplexity=ppl)
        log.add(f"c{i}", s, succeeded=ok, loss_evals=5, wall_s=1.0)
    summ = log.summary("x", ["c0", "c1", "c2"])
    assert summ["quality"]["n"] == 3 and summ["quality_applied"]["n"] == 2
    assert summ["quality"]["perplexity_change_pct"] == pytest.approx((1 + 300 + 3) / 3)
    assert summ["quality_applied"]["perplexity_change_pct"] == pytest.approx((1 + 3) / 2)
    none = RowLog(tmp_path / "row-y-L0.jsonl", {"row": "y"})
    none.add("c0", RequestScores("c0", 0, 0, 0, 0, 0, 0), succeeded=False, loss_evals=5, wall_s=1.0)
    assert none.summary("y", ["c0"])["quality_applied"] == {"n": 0}
    row = summ | {"sequences_mean": 1, "forward_calls_mean": 1, "backward_calls_mean": 0, "peak_rss_mb": 1}
    line = format_rows([row]).splitlines()
    assert "ppl%a" in line[0] and "   2.00" in line[1] and " 101.33" in line[1]


def test_row_summary_lists_the_refused_requests_and_the_table_says_so(tmp_path):
    """A request refused before any search (subject at the prompt's position 0) is named in the
    row's ``refused`` and counted under the table; the row's own line stays the second."""
    from mobiedit.bench import row_summary
    from mobiedit.bench_report import format_rows
    from mobiedit.evaluate import RequestScores
    from mobiedit.rowlog import RowLog

    log = RowLog(tmp_path / "row-x-L0.jsonl", {"row": "x"})
    for i, status in enumerate(["SUCCESS_CHECK", "REFUSED", "MAX_STEPS"]):
        log.add(f"c{i}", RequestScores(f"c{i}", 1.0, 1.0, 1.0, 1.0, 1.0, 1.0), method="rome",
                succeeded=status == "SUCCESS_CHECK", status=status, loss_evals=0 if status == "REFUSED" else 9,
                sequences=1, forward_calls=1, backward_calls=0, wall_s=1.0, peak_rss_mb=1.0, pid=1)
    res = row_summary("x", 0, log, ["c0", "c1", "c2"])
    assert res["refused"] == ["c1"]
    lines = format_rows([res]).splitlines()
    assert lines[1].startswith("x ") and lines[-1].startswith("refused before any search") and lines[-1].endswith("x 1")
    assert len(format_rows([res | {"refused": []}]).splitlines()) == 2


_ORPHAN_SCRIPT = """
import multiprocessing as mp, os, sys, time
from mobiedit.bench import run_watched

def body():
    time.sleep(120)

if __name__ == "__main__":
    p = mp.get_context("spawn").Process(target=run_watched, args=(body, (), os.getpid()))
    p.start()
    print(p.pid, flush=True)
    time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie (Linux /proc)."""
    assert os.path.isdir("/proc/self"), "this check reads /proc"
    try:
        with open(f"/proc/{pid}/status") as f:
            return not any(line.startswith("State:") and "Z" in line.split()[1] for line in f)
    except FileNotFoundError:
        return False


def test_a_bench_child_ends_with_its_killed_parent(tmp_path):
    """SIGKILL reaches the parent alone: its spawned row child notices and exits instead of editing
    on as an orphan (mobiedit.bench.exit_with_parent: every bench, bench-shape, tune and demo child)."""
    import signal
    import subprocess
    import sys
    import time

    script = tmp_path / "orphan.py"
    script.write_text(_ORPHAN_SCRIPT)
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    assert _alive(child)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    deadline = time.monotonic() + 20
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(child)
