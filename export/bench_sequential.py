"""``mobiedit bench-bundle-sequential``: a bundle edited N times through ``edit --bundle``'s code,
scored through the bundle's own programs (issue 16: "a bundle edited 50 times keeps answering all
50 new facts and its neighbours").

    mobiedit bench-bundle-sequential --bundle B --n 50 --checkpoints 10 50 --out DIR

Contract: the user's bundle is never written. It is copied (``shutil.copytree``, its ``journal/``
left out, so the copy starts unedited) into ``--work`` or a temporary folder; the first ``--n``
requests are edited one after another on the copy with :func:`~mobiedit.export.ops.edit_bundle`
(one call per request, the bundle's recipe); at each checkpoint every request edited so far and
a probe of ``--probe`` never-edited requests are scored with :class:`BundleScorer` — teacher-forced
token accuracy through the copy's ``prefill`` + ``decode`` programs with its active journal edits
in the slots, the definitions of :mod:`mobiedit.evaluate` (efficacy, generalization, locality =
neighbour argmax unchanged vs the unedited bundle; the probe's true-answer accuracy). Finally every
edit is undone (:func:`~mobiedit.export.ops.undo_bundle_edit`) and the probe's logits must equal the
unedited bundle's bit for bit. ``--n`` above the bundle's slots fails before anything runs.
"""
from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported where used: registering the verb must not import torch
    from .scoring import BundleScorer, Tf

log = logging.getLogger(__name__)

RESULT_JSON = "bundle_sequential.json"
RESULT_PNG = "bundle_sequential.png"
DEFAULT_CHECKPOINTS = (10, 50)


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The arguments of ``mobiedit bench-bundle-sequential``."""
    p.add_argument("--bundle", required=True, help="an exported bundle folder (copied; never modified)")
    p.add_argument("--n", type=int, default=50, help="requests edited one after another (at most the bundle's slots)")
    p.add_argument("--requests", help="request file (default: bundled CounterFact 1k)")
    p.add_argument("--checkpoints", type=int, nargs="*", default=list(DEFAULT_CHECKPOINTS),
                   help="edit counts to score at (capped at --n, which is always one)")
    p.add_argument("--probe", type=int, default=20, help="never-edited requests after the first --n (drift probe)")
    p.add_argument("--out", help=f"folder for {RESULT_JSON} and {RESULT_PNG} (written atomically)")
    p.add_argument("--work", type=Path, help="keep the edited copy in WORK/bundle (a new or empty folder; "
                                             "default: a temporary folder, removed)")
    p.add_argument("--force", action="store_true",
                   help="apply edits that missed their success criterion (as `edit --bundle --force`)")
    p.add_argument("--repair", action="store_true",
                   help="re-teach lost earlier edits after each edit (as `edit --bundle --repair`)")
    p.add_argument("--stop-on", choices=("loop", "written"), default=None,
                   help="what stops each search (as `edit --bundle --stop-on`; default: the bundle recipe's "
                        "success.stop_on)")


def _mean(xs: list[float]) -> float:
    """Mean without NaNs (NaN when nothing is left), as :mod:`mobiedit.evaluate`."""
    xs = [x for x in xs if x == x]
    return sum(xs) / len(xs) if xs else float("nan")


def _agree(now: list[Tf], ref: list[list[int]]) -> float:
    """Mean over prompts of the share of positions whose argmax equals ``ref``'s (NaN: no prompts)."""
    return _mean([_mean([float(a == b) for a, b in zip(t.argmax(), r)]) for t, r in zip(now, ref)])


@dataclass
class Reference:
    """The unedited bundle's predictions: neighbour argmax per case id, and for the probe requests
    their true-answer passes and neighbour passes (compared bit for bit by :func:`undo_check`)."""

    neighbour_argmax: dict[str, list[list[int]]]
    probes: list
    probe_true: dict[str, Tf]
    probe_neighbours: dict[str, list[Tf]]


def reference(sc: BundleScorer, edits: list, probes: list) -> Reference:
    """Score the (unedited) bundle ``sc`` on every neighbour prompt and the probe's true answers."""
    nb = {r.case_id: sc.neighbours(r) for r in edits + probes}
    return Reference({k: [t.argmax() for t in v] for k, v in nb.items()}, list(probes),
                     {r.case_id: sc.score(r.rewrite_prompt, r.target_true) for r in probes if r.target_true},
                     {r.case_id: nb[r.case_id] for r in probes})


def checkpoint_row(sc: BundleScorer, ref: Reference, edits: list, applied: set[str]) -> dict:
    """Metrics (percent) after ``len(edits)`` edits: efficacy / exact / generalization / locality
    over every request edited so far, retention over the applied ones, the probe's locality and
    true-answer accuracy."""
    eff = {r.case_id: sc.score(r.rewrite_prompt, r.target_new).acc() for r in edits}
    gen = [_mean([sc.score(p, r.target_new).acc() for p in r.paraphrase_prompts]) for r in edits]
    loc = [_agree(sc.neighbours(r), ref.neighbour_argmax[r.case_id]) for r in edits]
    probe_loc = [_agree(sc.neighbours(r), ref.neighbour_argmax[r.case_id]) for r in ref.probes]
    probe_true = [sc.score(r.rewrite_prompt, r.target_true).acc() for r in ref.probes if r.target_true]
    kept = [v for k, v in eff.items() if k in applied]
    return {"edits": len(edits), "applied": len(applied), "efficacy_acc": 100 * _mean(list(eff.values())),
            "efficacy_exact": 100 * _mean([float(v == 1.0) for v in eff.values()]),
            "retention_applied_acc": 100 * _mean(kept), "generalization_acc": 100 * _mean(gen),
            "locality_acc": 100 * _mean(loc), "probe_locality_acc": 100 * _mean(probe_loc),
            "probe_true_acc": 100 * _mean(probe_true)}


def undo_check(bundle, sc: BundleScorer, ref: Reference, edits: list) -> dict:
    """Undo every active edit of ``bundle`` (newest first); then the slots must be empty, the
    probe's logits (true answers and neighbours) equal the unedited bundle's bit for bit, and the
    edited requests' neighbour predictions equal the unedited ones."""
    import torch

    from .ops import undo_bundle_edit

    ids = [e.id for e in bundle.journal().entries(active_only=True)]
    for i in reversed(ids):
        undo_bundle_edit(bundle, i)
    sc.refresh()
    same = [torch.equal(sc.score(r.rewrite_prompt, r.target_true).logits, ref.probe_true[r.case_id].logits)
            for r in ref.probes if r.case_id in ref.probe_true]
    same += [torch.equal(a.logits, b.logits) for r in ref.probes
             for a, b in zip(sc.neighbours(r), ref.probe_neighbours[r.case_id])]
    edited = all([t.argmax() for t in sc.neighbours(r)] == ref.neighbour_argmax[r.case_id] for r in edits)
    empty = sc.slots_empty()
    return {"undone": len(ids), "slots_empty": empty, "probe_passes": len(same),
            "probe_logits_bit_exact": all(same), "edited_neighbours_unchanged": edited,
            "restores_unedited": empty and all(same) and edited}


@dataclass(frozen=True)
class Settings:
    """One run: the source bundle, the request file, ``n`` edits, the checkpoints (sorted, ``n``
    included), the probe size, ``force`` (apply edits that missed), the output and work folders,
    ``repair`` (re-teach lost earlier edits, ``edit_bundle(repair=True)``), ``stop_on`` (what stops
    each search, ``edit_bundle(stop_on=...)``; None: the recipe's)."""

    bundle: Path
    requests: Path
    n: int
    marks: tuple[int, ...]
    probe: int = 20
    force: bool = False
    out: Path | None = None
    work: Path | None = None
    repair: bool = False
    stop_on: str | None = None


def settings_from_args(args: argparse.Namespace) -> Settings:
    """:class:`Settings` of the parsed flags. Raises ConfigError for ``--n`` < 1, ``--probe`` < 0,
    and a ``--work`` / ``--out`` inside the bundle (the bundle is never written)."""
    from mobiedit.errors import ConfigError
    from mobiedit.requests import bundled_path
    from mobiedit.sequential_run import checkpoint_marks

    if args.n < 1:
        raise ConfigError(f"must be >= 1, got {args.n}", where="--n", fix="edit at least one request")
    if args.probe < 0:
        raise ConfigError(f"must be >= 0, got {args.probe}", where="--probe", fix="pass 0 or more")
    src = Path(args.bundle)
    for flag, value in (("--out", args.out), ("--work", args.work)):
        if value is not None and _inside(Path(value), src):
            raise ConfigError(f"{value} is inside the bundle {src}", where=flag,
                              fix="choose a folder outside the bundle (it is never written)")
    req = Path(args.requests) if args.requests else bundled_path("counterfact-edit-1k.json")
    return Settings(src, req, args.n, checkpoint_marks(args.checkpoints, args.n), args.probe, args.force,
                    Path(args.out) if args.out else None, args.work, getattr(args, "repair", False),
                    getattr(args, "stop_on", None))


def _inside(path: Path, folder: Path) -> bool:
    p, f = path.resolve(), folder.resolve()
    return p == f or f in p.parents


def scored_pairs(req, edited: bool) -> list[tuple[str, str]]:
    """The (prompt, target) passes ``req`` is scored with: an edited request's new target on its
    rewrite and paraphrase prompts, a probe's true answer; both: the neighbours' answers."""
    nb = list(zip(req.neighborhood_prompts, req.neighborhood_answers))
    if edited:
        return [(req.rewrite_prompt, req.target_new), *((p, req.target_new) for p in req.paraphrase_prompts), *nb]
    return ([(req.rewrite_prompt, req.target_true)] if req.target_true else []) + nb


def check_bundle(bundle, edits: list, probes: list) -> None:
    """Fail before any edit: more ``edits`` than the bundle's slots (ConfigError, ``--n``), an edit
    batch that does not fit the edit programs' shapes, or a scored prompt + target longer than the
    KV cache (BundleError, ``--requests``)."""
    from mobiedit.editing.config import ObjectiveConfig
    from mobiedit.errors import BundleError, ConfigError
    from mobiedit.prompts import prompt_ids, target_ids

    from .verify import edit_shapes_of
    from .packing import fit_shapes, requests_needs

    m, n, tok = bundle.manifest, len(edits), bundle.tokenizer()
    if n > m["slots"]:
        raise ConfigError(f"{n} edits need {n} rank-one slots, the bundle {bundle.path} has {m['slots']}",
                          where="--n", fix=f"re-export the bundle with `mobiedit export --slots {n}` (or more, "
                                           f"at most 4096), or pass --n {m['slots']} or fewer")
    have, objective = edit_shapes_of(m), ObjectiveConfig(**m["edit"]["objective"])
    for r, need in zip(edits, requests_needs(tok, edits, m["edit"]["templates"], objective)):
        if fit_shapes(have, [need]) != have:
            raise BundleError(f"request {r.case_id!r} does not fit the edit programs' shapes", where="--requests",
                              fix=f"re-export with `mobiedit export --fit-requests FILE --fit-n {n}`")
    T = m["shapes"]["max_seq_len"]
    for r, edited in [(r, True) for r in edits] + [(r, False) for r in probes]:
        for prompt, target in scored_pairs(r, edited):
            if len(prompt_ids(tok, prompt)) + len(target_ids(tok, target)) - 1 > T:
                raise BundleError(f"request {r.case_id!r}: {prompt!r} + {target!r} is longer than the bundle's "
                                  f"{T} positions", where="--requests",
                                  fix="re-export with a larger --max-seq-len or pass shorter requests")


def copy_unedited(src: Path, dest: Path):
    """Copy the bundle ``src`` to ``dest`` without its ``journal/`` (a fresh empty journal instead);
    returns the verified copy."""
    import shutil

    from mobiedit.journal import Journal

    from .bundle import JOURNAL, load_bundle

    shutil.copytree(src, dest, ignore=lambda folder, names: [JOURNAL] if Path(folder) == src else [])
    Journal.open(dest / JOURNAL)
    return load_bundle(dest)


def edit_record(i: int, res, repairs: list = ()) -> dict:
    """The record of edit ``i`` (1-based) from a :class:`~mobiedit.export.ops.BundleEditResult`,
    with the repairs that followed it (``repair``: one record each, ``repair_of`` the edit id)."""
    cfg = (res.entry.config or {}) if res.entry is not None else {}
    rec = {"edit": i, "case_id": res.request.case_id, "applied": res.applied, "succeeded": res.succeeded,
           "status": res.status, "loss_evals": res.loss_evals, "wall_s": round(res.wall_time, 2),
           "clamp_norm_factor": cfg.get("clamp_norm_factor"), "ladder_tries": cfg.get("ladder_tries"),
           "loop_succeeded": res.loop_succeeded, "written_refused": res.written_refused,
           "edit_id": res.entry.id if res.entry is not None else None}
    if repairs:
        rec["repairs"] = [{"repair_of": r.repair_of, "case_id": r.request.case_id, "applied": r.applied,
                           "loss_evals": r.loss_evals, "wall_s": round(r.wall_time, 2)} for r in repairs]
    return rec


def run(s: Settings, progress: bool = False) -> dict:
    """Edit, score and undo (see the module docstring); writes ``s.out`` after every checkpoint.
    Returns the result: the header, ``unedited`` (the metrics before any edit), ``table`` (one row
    per checkpoint), ``edits`` (one record per edit) and ``undo``."""
    import tempfile

    from tqdm import tqdm

    from mobiedit.digest import files_sha256
    from mobiedit.errors import ConfigError
    from mobiedit.requests import load_requests

    from .bundle import load_bundle
    from .manifest_check import update_of
    from .ops import edit_bundle
    from .recipe import recipe_of
    from .scoring import BundleScorer

    t0 = time.perf_counter()
    reqs = load_requests(s.requests)
    if len(reqs) < s.n:
        raise ConfigError(f"only {len(reqs)} requests for {s.n} edits", where="--n",
                          fix="pass fewer edits or a larger --requests file")
    edits, probes = reqs[:s.n], reqs[s.n:s.n + s.probe]
    src = load_bundle(s.bundle)
    check_bundle(src, edits, probes)
    if s.work is not None and s.work.exists() and any(s.work.iterdir()):
        raise ConfigError(f"{s.work} is not empty", where="--work", fix="choose a new or empty folder")
    tmp = None if s.work else tempfile.TemporaryDirectory(prefix="mobiedit-bundle-seq-")
    try:
        b = copy_unedited(s.bundle, Path(s.work or tmp.name) / "bundle")
        sc = BundleScorer(b)
        ref = reference(sc, edits, probes)
        m = b.manifest
        result = {"bundle": str(s.bundle), "runtime": m["runtime"], "quantization": m["quantization"],
                  "edit_quantization": m["edit_quantization"], "slots": m["slots"], "n": s.n,
                  "checkpoints": list(s.marks), "probe": len(probes), "force": s.force, "repair": s.repair,
                  "stop_on": s.stop_on or recipe_of(m).stop_on,
                  "update": update_of(m)._asdict(),
                  "requests": str(s.requests),
                  "requests_sha256": files_sha256([s.requests]),
                  "source_active_edits": len(src.journal(readonly=True).entries(active_only=True)),
                  "unedited": {**checkpoint_row(sc, ref, edits, set()), "edits": 0},
                  "table": [], "edits": [], "undo": None, "work": str(b.path) if s.work else None}
        applied: set[str] = set()
        with tqdm(edits, desc="edit --bundle", unit="edit", disable=not progress) as bar:
            for i, req in enumerate(bar, 1):
                res, *repairs = edit_bundle(b, [req], force=s.force, repair=s.repair, stop_on=s.stop_on)
                result["edits"].append(edit_record(i, res, repairs))
                applied |= {req.case_id} if res.applied else set()
                bar.set_postfix(applied=len(applied), refresh=False)
                if i in s.marks:
                    t1 = time.perf_counter()
                    sc.refresh()
                    row = checkpoint_row(sc, ref, edits[:i], applied)
                    result["table"].append({**row, "score_s": round(time.perf_counter() - t1, 2)})
                    log.info("checkpoint %s", result["table"][-1])
                    save(result, s.out)
        result["undo"] = undo_check(b, sc, ref, edits)
    finally:
        if tmp is not None:
            tmp.cleanup()
    result["wall_seconds"] = round(time.perf_counter() - t0, 1)
    save(result, s.out)
    return result


def _plain(x):
    """``x`` with NaN floats as None (strict JSON)."""
    if isinstance(x, dict):
        return {k: _plain(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_plain(v) for v in x]
    return None if isinstance(x, float) and x != x else x


def save(result: dict, out: Path | None) -> None:
    """Write ``out/bundle_sequential.json`` and ``.png`` atomically (nothing when ``out`` is None)."""
    import json

    from mobiedit.atomic import atomic_write_text

    if out is None:
        return
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / RESULT_JSON, json.dumps(_plain(result), indent=1))
    plot(result, out / RESULT_PNG)


#: checkpoint curves: (table key, label)
CURVES = (("efficacy_acc", "efficacy (new target, token acc)"), ("efficacy_exact", "efficacy (whole target)"),
          ("generalization_acc", "generalization (paraphrases)"), ("locality_acc", "locality (neighbours unchanged)"),
          ("probe_locality_acc", "probe locality (never edited)"), ("probe_true_acc", "probe true answer"))


def plot(result: dict, png: Path) -> None:
    """Left: the checkpoint metrics against edits so far (edits 0 = the unedited bundle); right:
    each edit's loss evaluations, coloured by its success. Written atomically."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    from mobiedit.atomic import atomic_path

    rows = [result["unedited"], *result["table"]]
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.8))
    for key, label in CURVES:
        left.plot([r["edits"] for r in rows], [r[key] for r in rows], marker="o", label=label)
    left.set(ylim=(-3, 103), xlabel="edits so far", ylabel="%", title="Bundle scored through its own programs")
    left.legend(fontsize=7)
    left.grid(alpha=0.3)
    for ok, color, label in ((True, "tab:blue", "succeeded"), (False, "tab:red", "missed its success criterion")):
        pts = [(e["edit"], e["loss_evals"]) for e in result["edits"] if e["succeeded"] is ok]
        if pts:
            right.bar([x for x, _ in pts], [y for _, y in pts], color=color, label=label)
    for ax in (left, right):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    right.set(xlabel="edit", ylabel="loss evaluations", title="Per edit (edit --bundle)")
    right.legend(fontsize=7)
    fig.suptitle(f"{result['runtime']} bundle ({result['quantization']}), {result['n']} sequential edits", fontsize=11)
    fig.tight_layout()
    with atomic_path(png, suffix=".png") as tmp:
        fig.savefig(tmp, format="png", dpi=100)
    plt.close(fig)


def format_table(result: dict) -> str:
    """The checkpoint table (first row: the unedited bundle) and the undo check, for stdout."""
    head = (f"{'edits':>5} {'applied':>7} {'eff acc':>7} {'eff exact':>9} {'gen acc':>7} {'loc acc':>7} "
            f"{'probe loc':>9} {'probe true':>10} {'s/edit':>7}")
    lines, last = [head], 0
    for r in [result["unedited"], *result["table"]]:
        walls = [e["wall_s"] + sum(x["wall_s"] for x in e.get("repairs", ())) for e in result["edits"][last:r["edits"]]]
        per = f"{sum(walls) / len(walls):>7.1f}" if walls else f"{'-':>7}"
        lines.append(f"{r['edits']:>5} {r['applied']:>7} {r['efficacy_acc']:>7.1f} {r['efficacy_exact']:>9.1f} "
                     f"{r['generalization_acc']:>7.1f} {r['locality_acc']:>7.1f} {r['probe_locality_acc']:>9.1f} "
                     f"{r['probe_true_acc']:>10.1f} {per}")
        last = r["edits"]
    rep = [x for e in result["edits"] for x in e.get("repairs", ())]
    if result.get("repair"):
        lines.append(f"repairs of lost earlier edits: {sum(x['applied'] for x in rep)} applied of {len(rep)} tried "
                     f"(s/edit includes them)")
    u = result["undo"] or {}
    lines.append(f"undo of {u.get('undone')} edits: slots empty {u.get('slots_empty')}, probe logits bit-exact "
                 f"{u.get('probe_logits_bit_exact')} ({u.get('probe_passes')} passes), edited neighbours unchanged "
                 f"{u.get('edited_neighbours_unchanged')} -> {'ok' if u.get('restores_unedited') else 'FAILED'}")
    return "\n".join(lines)
