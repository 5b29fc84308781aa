"""``mobiedit bench``: methods side by side — quality, loss evaluations, passes, wall time and
peak RSS per edit, each row in its own child process (one torch thread), JSON + PNG.

A *row* is a named method configuration (:mod:`mobiedit.bench_rows`: a table of overrides, not
code branches, plus the run's ``--set`` settings). Each row edits the same N requests (from
``--offset`` on) independently on the unedited model (edit → score → restore).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import multiprocessing as mp
import os
import statistics
from pathlib import Path

from .errors import ConfigError
from .resolve import add_model_args
from .bench_rows import TUNED_ROWS, RowSpec, parse_rows, parse_sets, row_config, tuned_paper_lr
from .bench_rows import ROWS  # noqa: F401  (re-exported: the row table)
from .quiet import NOTICE

log = logging.getLogger(__name__)


def row_identity(spec: RowSpec, model_dir: str, req_file: str, layer: int, seed: int, ability: bool) -> dict:
    """What a row's results depend on (its :class:`~mobiedit.rowlog.RowLog` refuses to mix runs)."""
    from .config_io import to_dict
    from .digest import files_sha256

    return {"row": spec.name, "config": to_dict(row_config(spec.name, layer, seed, spec.sets, model_dir)),
            "model": str(Path(model_dir).resolve()),
            "requests_sha256": files_sha256([Path(req_file)]), "layer": layer, "seed": seed, "ability": ability}


def exit_with_parent(parent: int, poll_s: float = 1.0) -> None:
    """In a spawned child of process ``parent`` (its pid, taken in the parent — a parent killed
    while the child starts up must count as gone): exit (code 3) once it is gone, so that a bench
    or tune stopped by SIGTERM or SIGKILL (which reach the parent only) leaves no orphan that goes
    on editing for hours and appending to the row log. A daemon thread polls ``os.getppid()``."""
    import threading
    import time

    if os.getppid() != parent:
        os._exit(3)

    def watch() -> None:
        while True:
            time.sleep(poll_s)
            if os.getppid() != parent:
                os._exit(3)

    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def run_watched(target, args: tuple, parent: int) -> None:
    """A spawned child's body: ``target(*args)``, ended with the process ``parent``
    (:func:`exit_with_parent`)."""
    exit_with_parent(parent)
    target(*args)


def spawn_watched(target, args: tuple) -> int:
    """Run ``target(*args)`` in a spawned child that ends with this process (:func:`run_watched`);
    wait for it and return its exit code. The one way the bench, bench-shape, tune and demo
    children are started."""
    p = mp.get_context("spawn").Process(target=run_watched, args=(target, args, os.getpid()))
    p.start()
    p.join()
    return p.exitcode


#: config fields whose default changed after they existed, with the value a log that predates the
#: field ran with (its absence in a log means that value, not today's default): ``stop_on`` came
#: in session 16 defaulting to "loop", the behaviour of every earlier log; its default is "written" now;
#: ``reuse_checked`` came in session 36 (on): earlier logs scored a checked point again (off)
LEGACY_DEFAULTS = {"stop_on": "loop", "reuse_checked": False}


def identity_defaults(cfg) -> dict:
    """What a field missing from an older row log stands for, shaped like :func:`row_identity` (a
    row log written before a config field existed resumes when the row sets that field to the
    value the older code ran with): the defaults of ``cfg``'s config class, with
    :data:`LEGACY_DEFAULTS` over those it has."""
    from .config_io import to_dict

    defaults = to_dict(type(cfg)())
    return {"config": {**defaults, **{k: v for k, v in LEGACY_DEFAULTS.items() if k in defaults}}}


def verdict_figures(recs: list[dict]) -> dict:
    """Verify after write (:mod:`mobiedit.methods.verify`): the search's own success rate, how
    often its verdict agrees with the edited model's, the edits it called done that the edited
    model does not say, the same for the search graph's ``edit_holds`` at the found delta (the
    edited model's own rule, without the search's NLL margin: ``holds_agreement``), and the write error at the context templates' keys (median of the
    per-edit means). Empty when the row did not verify."""
    checked = [r for r in recs if r.get("loop_succeeded") is not None]
    if not checked:
        return {}
    errs = sorted(r["write"]["write_error_templates_mean"] for r in checked)
    out = {"loop_success_rate": 100.0 * sum(r["loop_succeeded"] for r in checked) / len(checked),
           "verdict_agreement": 100.0 * sum(r["loop_succeeded"] == r["succeeded"] for r in checked) / len(checked),
           "loop_only_successes": sum(r["loop_succeeded"] and not r["succeeded"] for r in checked),
           "write_error_templates_median": statistics.median(errs),
           "write_error_plain_max": max(r["write"]["write_error_plain"] for r in checked)}
    held = [r for r in checked if r.get("loop_holds") is not None]  # logs older than the field lack it
    if held:  # the same rule (edit_holds) on the search's graph and on the edited model
        out["holds_agreement"] = 100.0 * sum(r["loop_holds"] == r["succeeded"] for r in held) / len(held)
        out["loop_holds_only"] = sum(r["loop_holds"] and not r["succeeded"] for r in held)
    return out


def row_summary(name: str, layer: int, rlog, case_ids: list[str]) -> dict:
    """The row's result dict from its per-request log (the first ``case_ids``)."""
    from .methods.common import REFUSED

    recs = rlog.records(case_ids)
    return rlog.summary(name, case_ids) | {
        "method": recs[0]["method"], "layer": layer,
        "loss_evals_mean": statistics.mean(r["loss_evals"] for r in recs),  # failures counted at their budget
        "loss_evals_per_edit": [r["loss_evals"] for r in recs],
        "distinct_evals_per_edit": [r.get("distinct_evals", r["loss_evals"]) for r in recs],
        "succeeded_per_edit": [r["succeeded"] for r in recs],
        "sequences_mean": statistics.mean(r["sequences"] for r in recs),
        "forward_calls_mean": statistics.mean(r["forward_calls"] for r in recs),
        "backward_calls_mean": statistics.mean(r["backward_calls"] for r in recs),
        "run_wall_s": sum(r["wall_s"] for r in recs),
        "peak_rss_mb": max(r["peak_rss_mb"] for r in recs),
        "processes": len({r["pid"] for r in recs}),  # > 1: the row was resumed
        "refused": [r["case_id"] for r in recs if r.get("status") == REFUSED],  # before any search, nothing written
    } | verdict_figures(recs)


def request_slice(req_file: str | Path, n: int, offset: int = 0) -> list:
    """The requests a row runs: ``n`` from ``offset`` on (a tuning sweep takes other ones than a report)."""
    from .requests import load_requests

    return load_requests(req_file)[offset:offset + n]


def _child(spec: RowSpec, model_dir: str, req_file: str, layer: int, seed: int, out: str,
           ability: bool = True, progress: bool = False, offset: int = 0) -> None:
    """Run one row in this (child) process and write its result JSON to ``out``. Each finished
    request is appended to ``out``'s ``.jsonl`` :class:`~mobiedit.rowlog.RowLog` first, so a rerun
    resumes there. ``ability`` adds fluency and held-out perplexity before/after each edit
    (:mod:`mobiedit.ability`). A forward-only row quantizes its forward model once, before the
    first request (a phone holds it quantized): s/edit is the edit alone."""
    from .rss import peak_rss_mb

    import torch
    from tqdm import tqdm

    torch.set_num_threads(1)
    from .quiet import quiet_libraries
    from .models import load_model
    from .rowlog import RowLog
    from .session import check_fits, edit_independent, forward_model_for, prepare

    quiet_libraries()
    name = spec.label
    cfg = row_config(spec.name, layer, seed, spec.sets, model_dir)
    rlog = RowLog(Path(out).with_suffix(".jsonl"), row_identity(spec, model_dir, req_file, layer, seed, ability),
                  identity_defaults(cfg))
    reqs = request_slice(req_file, spec.n, offset)
    todo = [r for r in reqs if r.case_id not in rlog.done]
    if todo:
        lm = load_model(model_dir)
        check_fits(lm, reqs, subjects=False)  # before prepare's forward passes; a refused edit is a record
        ctx = prepare(lm, cfg, seed)
        fwd = forward_model_for(lm, cfg)
        probe = None
        if ability:
            from .ability import AbilityProbe

            probe = AbilityProbe(lm.model, lm.tokenizer, lm.family, layer)
        for req in tqdm(todo, desc=f"{name} L{layer}", initial=len(reqs) - len(todo), total=len(reqs),
                        disable=not progress, unit="edit"):
            rec = edit_independent(lm, [req], cfg, ctx, progress=False, fwd_model=fwd, ability=probe)[0]
            o = rec.outcome
            rlog.add(req.case_id, rec.scores, method=o.method, succeeded=bool(o.succeeded), status=o.status,
                     loss_evals=o.loss_evals, sequences=o.sequences, forward_calls=o.forward_calls,
                     backward_calls=o.backward_calls, wall_s=o.wall_time, peak_rss_mb=peak_rss_mb(), pid=os.getpid(),
                     loop_succeeded=o.loop_succeeded, loop_holds=o.loop_holds, write=o.write,
                     distinct_evals=o.distinct_evals if o.distinct_evals is not None else o.loss_evals,
                     **delta_figures(o))
    res = row_summary(name, layer, rlog, [r.case_id for r in reqs])
    Path(out).write_text(json.dumps(res))


def delta_figures(o) -> dict:
    """The found value delta's norm (model units) for the row log, and for a search with a settle
    phase (:class:`~mobiedit.recipes.Settle`) its norm at the first success and the rounds kept."""
    out = {"delta_norm": float(o.delta.norm())} if o.delta is not None else {}
    return out | {k: o.config[k] for k in ("found_norm", "settled") if k in (o.config or {})}


def run_row(spec: RowSpec, model_dir: Path, req_file: Path, layer: int, seed: int, workdir: Path,
            ability: bool = True, progress: bool = False, offset: int = 0) -> dict:
    """Run ``spec`` in a fresh spawned process (resuming its ``row-NAME[-SETTINGS]-LX.jsonl`` log
    in ``workdir``); return its result dict."""
    from .rowlog import RowLog

    name = spec.label
    out = workdir / f"{spec.stem}-L{layer}.json"
    rlog = RowLog(out.with_suffix(".jsonl"), row_identity(spec, str(model_dir), str(req_file), layer, seed, ability),
                  identity_defaults(row_config(spec.name, layer, seed, spec.sets, model_dir)))
    ids = [r.case_id for r in request_slice(req_file, spec.n, offset)]
    if all(c in rlog.done for c in ids):  # every request already measured: no child, no model load
        return row_summary(name, layer, rlog, ids)
    out.unlink(missing_ok=True)
    code = spawn_watched(_child, (spec, str(model_dir), str(req_file), layer, seed, str(out), ability, progress, offset))
    if code != 0 or not out.is_file():
        raise ConfigError(f"bench row {name!r} failed in its child process (exit {code})",
                          where=f"row {name}", fix="run it alone with -v to see the error")
    return json.loads(out.read_text())


def tune_rows(rows: list[RowSpec], tuned_from: Path | None, case_ids: list[str]) -> tuple[list[RowSpec], dict | None]:
    """The paper-tuned rows get the lr of the sweep ``tuned_from`` (:func:`tuned_paper_lr`) as a
    setting; without them, nothing changes. Returns the rows and the sweep's table (or None)."""
    if not any(r.name in TUNED_ROWS for r in rows):
        return rows, None
    if tuned_from is None:
        raise ConfigError("the paper-tuned rows need the sweep that chooses their lr", where="--tuned-from",
                          fix="run `mobiedit bench --rows paper-lr0.05,...,paper-lr3.2 --offset M --n 20 --out DIR` "
                              "on other requests, then pass --tuned-from DIR")
    lr, table = tuned_paper_lr(tuned_from, case_ids)
    out = [dataclasses.replace(r, sets=r.sets + (("zo.lr", lr),)) if r.name in TUNED_ROWS else r for r in rows]
    return out, {"from": str(tuned_from), "lr": lr, "rows": table}


def cmd_bench(args) -> int:
    from .atomic import atomic_write_text
    from .bench_report import format_rows, plot
    from .resolve import edit_layer_for, layer_list, request_file, resolve_model

    if args.offset < 0:
        raise ConfigError(f"--offset must be >= 0, got {args.offset}", where="--offset", fix="e.g. --offset 800")
    if args.n < 1:
        raise ConfigError(f"--n must be >= 1, got {args.n}", where="--n", fix="e.g. --n 200")
    swept = layer_list(args.layers)
    sets = parse_sets(args.set)
    rows = parse_rows(args.rows, args.n, sets)  # every argument checked before any model work or output
    model_dir = resolve_model(args)
    layer = edit_layer_for(model_dir, args.layer)
    req_file = request_file(args.requests, model_dir)
    layers = swept or [layer]
    case_ids = [r.case_id for r in request_slice(req_file, max(r.n for r in rows), args.offset)]
    rows, sweep = tune_rows(rows, args.tuned_from, case_ids)
    from .digest import files_sha256
    from .profile import check_not_tuned_on

    check_not_tuned_on(model_dir, files_sha256([req_file]), case_ids)
    if not args.no_ability:  # the held-out text's package, checked here for a clear error
        from .corpora import LEE_FILE, data_file

        data_file(LEE_FILE)
    if args.jobs < 1:
        raise ConfigError(f"--jobs must be >= 1, got {args.jobs}", where="--jobs", fix="e.g. --jobs 2 (one per core)")
    for lay in layers:  # a --set key a row's config lacks fails here, before --out exists
        for spec in rows:
            row_config(spec.name, lay, args.seed, spec.sets, model_dir)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)

    def one(task: tuple[int, RowSpec]) -> dict:
        lay, spec = task
        log.log(NOTICE, "bench row %s at layer %d (%d requests of %s)...", spec.label, lay, spec.n, req_file.name)
        res = run_row(spec, model_dir, req_file, lay, args.seed, out, ability=not args.no_ability,
                      progress=not args.quiet and args.jobs == 1, offset=args.offset)  # one bar at a time
        if len(layers) > 1:
            res["row"] = f"{res['row']}@L{lay}"
        print(format_rows([res]).splitlines()[1], flush=True)  # the row's line (a refusal note may follow)
        return res

    tasks = [(lay, spec) for lay in layers for spec in rows]
    if args.jobs == 1:
        results = [one(t) for t in tasks]
    else:  # each row is its own child process: a thread only waits for it
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(args.jobs) as pool:
            results = list(pool.map(one, tasks))
    atomic_write_text(out / "bench.json", json.dumps({"model": str(model_dir), "layer": layer, "n": args.n,
                                                      "offset": args.offset, "case_ids": case_ids,
                                                      "settings": args.set or [], "paper_sweep": sweep,
                                                      "rows": results}, indent=1))
    plot(results, out / "bench.png")
    print(format_rows(results))
    print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")
    return 0


def register(sub) -> None:
    sp = sub.add_parser("bench", help="benchmark editing methods (JSON + PNG)")
    add_model_args(sp)
    sp.add_argument("--requests", help="request file (default: the model profile's `requests`, the facts it knows; else bundled CounterFact 1k)")
    sp.add_argument("--n", type=int, default=200, help="requests per row")
    sp.add_argument("--rows", default="rome", help=f"comma-separated rows (NAME or NAME:N requests) from {sorted(ROWS)}")
    sp.add_argument("--layer", type=int, help="edit layer (default: the model profile's)")
    sp.add_argument("--seed", type=int, default=0, help="seed of the context templates and the searches")
    sp.add_argument("--layers", help="comma-separated layers: run every row at each (a layer sweep)")
    sp.add_argument("--offset", type=int, default=0,
                    help="skip the first N requests of the file (a tuning sweep runs on other requests than a report)")
    sp.add_argument("--set", action="append", metavar="[ROW:]KEY=VALUE",
                    help="a config setting over every row (or the row named), dotted KEY, JSON VALUE; repeatable, "
                         "e.g. --set update.written_gain=true --set fzoo:zo.lr=0.3")
    sp.add_argument("--tuned-from", type=Path, metavar="SWEEP",
                    help="the paper-tuned rows' lr: the best row of this finished sweep (bench --rows paper-lr0.05,... "
                         "--offset M), whose requests must not overlap this run's")
    sp.add_argument("--jobs", type=int, default=1,
                    help="rows run at once, each a one-thread child (default 1; rows' s/edit then share the box)")
    sp.add_argument("--out", default="runs/bench", help="folder for bench.json, bench.png and the row logs")
    sp.add_argument("--no-ability", action="store_true",
                    help="skip fluency and held-out perplexity before/after each edit (faster)")
    sp.set_defaults(fn=cmd_bench)
