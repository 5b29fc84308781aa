"""``mobiedit tune``: choose a model's edit settings — the layer and any objective, context or
success setting (the clamp, the decay, the KL weight, the templates, the NLL margin, the settle phase) — by a small
grid of bench rows on requests the model knows, held apart from evaluation, and write the winner
into its profile.

Contract:
  * the candidates are the profile's current settings first, then every combination of ``--layers``
    and ``--grid KEY=V1,V2`` (``KEY`` under ``objective.``, ``context.``, ``success.`` or ``settle.``:
    what a profile carries; ``success.nll`` and ``settle.*`` are the forward-only search's margin and
    settle phase, so they need a MobiEdit row; ``zo.*`` and ``quant.*``, its estimator and forward,
    need ``--method mobiedit --scope method``);
  * each candidate is a :func:`mobiedit.bench.run_row` of one method row on the same ``n``
    requests (a child process each; its log in ``--out`` resumes an interrupted run);
  * the rank is :func:`tune_score`, the harmonic mean of efficacy, generalization and locality
    (unchanged vs the unedited model), efficacy and generalization by P(new) > P(true) (``--score
    prob``, the default) or by the greedy answer (``--score answers``); ties keep the earlier
    candidate, so the current settings stay unless a candidate does better;
  * ``--max-ppl-change P`` (which implies ``--ability``): each row also measures general ability
    (held-out perplexity and fluency before and after each edit); a candidate whose mean perplexity
    change is over ``P`` % is not chosen, whatever its score; with none within it the current
    settings stay, and the table says so;
  * ``--max-success-drop D`` (default 0): a candidate whose success rate (edits the edited model
    says after the write) is more than ``D`` points below the current settings' is not chosen either —
    a setting that scores higher by failing more edits is not a better setting;
  * the tuning requests default to the request file's last ``n``; their ids and the file's digest
    go into the profile (``notes.tune``), and ``mobiedit bench`` refuses to report on them
    (:func:`mobiedit.profile.check_not_tuned_on`);
  * ``tune.json`` + ``tune.png`` in ``--out``; the profile is written (atomically) only with
    ``--write-profile``: objective and context settings into its shared sections, or with ``--scope
    method`` into the tuned method's own (``methods.rome`` / ``methods.mobiedit``, its provenance in
    ``notes["tune:<method>"]``); the candidates' current settings are the profile's for that method.
"""
from __future__ import annotations

import itertools
import json
import logging
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .profile import METHOD_SECTIONS, TUNABLE_SECTIONS
from .resolve import add_model_args
from .quiet import NOTICE

log = logging.getLogger(__name__)

#: the default grid: ROME's clamp and decay, each around its default
DEFAULT_GRID = ("objective.clamp_norm_factor=2,4,8", "objective.weight_decay=0.1,0.5")
#: the settings a profile stores (:data:`mobiedit.profile.TUNABLE_SECTIONS`, and the forward-only
#: search's own ``zo`` / ``quant``: :data:`mobiedit.profile.METHOD_SECTIONS`), as grid-key prefixes
_OWN = METHOD_SECTIONS["mobiedit"]
_SECTIONS = tuple(f"{name}." for name in TUNABLE_SECTIONS + _OWN)


def parse_grid(items: list[str] | None) -> list[tuple[str, list[Any]]]:
    """``KEY=V1,V2`` items -> [(dotted key, values)], each value read as JSON (else a string);
    ``KEY=[V1, V2]`` (a JSON list) for values with commas, e.g. ``context.lengths=[[[5,5]],[[5,10]]]``."""
    out = []
    for item in items or []:
        key, eq, raw = item.partition("=")
        fix = ("write KEY=V1,V2 (or KEY=[V1, V2] in JSON) with KEY under objective., context., success., settle., "
               "zo. or quant. (what a profile stores), e.g. objective.clamp_norm_factor=2,4,8 or zo.h=0.05,0.2")
        if not eq or not raw or not key.startswith(_SECTIONS) or any(not p for p in key.split(".")):
            raise ConfigError(f"bad grid item {item!r}", where="--grid", fix=fix)
        if raw.lstrip().startswith("["):
            try:
                vals = json.loads(raw)
            except ValueError as e:
                raise ConfigError(f"bad JSON list in grid item {item!r} ({e})", where="--grid", fix=fix) from None
            if not isinstance(vals, list) or not vals:
                raise ConfigError(f"grid item {item!r} has no values", where="--grid", fix=fix)
            out.append((key, vals))
            continue
        vals = []
        for v in raw.split(","):
            try:
                vals.append(json.loads(v))
            except ValueError:
                vals.append(v)
        out.append((key, vals))
    return out


def candidates(layer: int, layers: list[int], grid: list[tuple[str, list[Any]]]) -> list[tuple[int, tuple]]:
    """[(layer, settings)]: the current settings at the profile's ``layer`` first, then the product
    of ``layers`` and the grid's values (without repeating the first)."""
    keys = [k for k, _ in grid]
    out = [(layer, ())]
    for lay in layers:
        for combo in itertools.product(*(v for _, v in grid)):
            cand = (lay, tuple(zip(keys, combo)))
            if cand not in out:
                out.append(cand)
    return out


def distinct(cands: list[tuple[int, tuple]], method_row: str, seed: int, model_dir: Path) -> list[tuple[int, tuple]]:
    """``cands`` without those whose resolved config repeats an earlier one's (a grid value equal
    to the current setting); a setting the row's config lacks fails here, before any edit."""
    from .bench_rows import row_config

    seen, out = [], []
    for lay, sets in cands:
        cfg = row_config(method_row, lay, seed, row_sets(sets), model_dir)
        if cfg not in seen:  # dataclass equality: 4 == 4.0
            seen.append(cfg)
            out.append((lay, sets))
    return out


def row_sets(sets: tuple) -> tuple:
    """A candidate's profile settings as the row config's keys (``success.nll`` -> ``success_nll``)."""
    from .profile import config_key

    return tuple((config_key(k), v) for k, v in sets)


#: what a candidate is ranked by: the harmonic mean of these quality columns (in %). ``prob``:
#: efficacy and generalization as P(new) > P(true) (the research convention); ``answers``: both as
#: the greedy answer's tokens (what a user reads back). Locality is the neighbours' answers
#: unchanged vs the unedited model in both.
SCORES = {"prob": ("efficacy_prob", "generalization_prob", "locality_unchanged"),
          "answers": ("efficacy_acc", "generalization_acc", "locality_unchanged")}


def score_label(score: str) -> str:
    """How ``tune.json`` and a profile's ``notes.tune`` name the score ``score``."""
    return f"harmonic mean of {', '.join(SCORES[score])}"


def tune_score(quality: dict, score: str = "prob") -> float:
    """Harmonic mean (in %) of the :data:`SCORES` columns named by ``score`` — efficacy,
    generalization and locality: one failing part sinks the score."""
    parts = [quality.get(k, float("nan")) for k in SCORES[score]]
    if any(math.isnan(p) for p in parts):
        return float("nan")
    return 0.0 if min(parts) <= 0 else len(parts) / sum(1.0 / p for p in parts)


def run_tune(model_dir: Path, req_file: Path, method_row: str, layer: int, cands: list[tuple[int, tuple]],
             n: int, offset: int, seed: int, out: Path, progress: bool, score: str = "prob",
             ability: bool = False) -> list[dict]:
    """Run every candidate as a bench row (with general ability when ``ability``); return the table
    (one dict per candidate, in order; ``perplexity_change_pct`` NaN without ability)."""
    from .bench import run_row
    from .bench_rows import RowSpec

    table = []
    for i, (lay, sets) in enumerate(cands):
        spec = RowSpec(method_row, n, row_sets(sets))
        log.log(NOTICE, "tune candidate %d/%d: layer %d %s", i + 1, len(cands), lay, dict(sets) or "(current settings)")
        res = run_row(spec, model_dir, req_file, lay, seed, out, ability=ability, progress=progress, offset=offset)
        table.append({"layer": lay, "settings": dict(sets), "score": tune_score(res["quality"], score),
                      "perplexity_change_pct": res["quality"].get("perplexity_change_pct", float("nan")),
                      "quality": res["quality"], "success_rate": res["success_rate"],
                      "loss_evals_median_success": res["loss_evals_median_success"],
                      "wall_per_edit_s": res["wall_per_edit_s"]})
        print(format_line(i, table[-1]), flush=True)
    return table


def within_budget(row: dict, max_ppl: float | None) -> bool:
    """``row``'s mean perplexity change is at most ``max_ppl`` % (always, without a budget; never
    when it was not measured)."""
    ppl = row.get("perplexity_change_pct", float("nan"))
    return max_ppl is None or (ppl == ppl and ppl <= max_ppl)


def note_row(row: dict) -> dict:
    """A candidate as the profile's ``notes.tune`` lists it: layer, settings, score and perplexity
    change, a figure not measured (NaN) as null — a profile is plain JSON."""
    out = {"layer": row["layer"], "settings": row["settings"]}
    for k in ("score", "perplexity_change_pct"):
        v = row.get(k, float("nan"))
        out[k] = v if v == v else None
    return out


def keeps_success(row: dict, current: dict, max_drop: float | None) -> bool:
    """``row``'s success rate (edits the edited model says, in %) is at most ``max_drop`` points
    below the current settings' ``current`` (always, without a guard; never when not measured)."""
    got, ref = row.get("success_rate", float("nan")), current.get("success_rate", float("nan"))
    return max_drop is None or row is current or (got == got and ref == ref and got >= ref - max_drop - 1e-9)


def eligible(row: dict, table: list[dict], max_ppl: float | None, max_success_drop: float | None) -> bool:
    """``row`` may be chosen: within the perplexity budget and the success guard against ``table[0]``."""
    return within_budget(row, max_ppl) and keeps_success(row, table[0], max_success_drop)


def best_index(table: list[dict], max_ppl: float | None = None, max_success_drop: float | None = None) -> int:
    """The highest score among the :func:`eligible` candidates (NaN never wins); ties keep the
    earlier candidate; none eligible (or none scored) keeps the current settings, 0."""
    best = None
    for i, row in enumerate(table):
        if row["score"] == row["score"] and eligible(row, table, max_ppl, max_success_drop) and \
                (best is None or row["score"] > table[best]["score"]):
            best = i
    return 0 if best is None else best


def format_line(i: int, row: dict) -> str:
    q = row["quality"]
    name = " ".join(f"{k.split('.')[-1]}={v}" for k, v in row["settings"].items()) or "current"
    nan = float("nan")
    return (f"{i:>3} L{row['layer']:<3}{name:<44}{row['score']:>7.1f}{q['efficacy_prob']:>7.1f}"
            f"{q['generalization_prob']:>7.1f}{q.get('efficacy_acc', nan):>7.1f}{q.get('generalization_acc', nan):>7.1f}"
            f"{q.get('locality_unchanged', nan):>7.1f}{row.get('perplexity_change_pct', nan):>7.2f}"
            f"{row['success_rate']:>7.1f}{row['wall_per_edit_s']:>8.2f}")


HEADER = (f"{'#':>3} {'L':<4}{'settings':<44}{'score':>7}{'effP':>7}{'genP':>7}{'eff':>7}{'gen':>7}{'locU':>7}"
          f"{'ppl%':>7}{'succ%':>7}{'s/edit':>8}")


def tuned_profile(model_dir: Path, row: dict, method_row: str, tuning: dict, own: str | None = None):
    """The model's profile with ``row``'s layer and settings (merged over its own) and the tuning's
    provenance in ``notes.tune``. With ``own`` (a method name, ``--scope method``) the objective and
    context settings go into that method's own section (``methods.<own>``) and the provenance into
    ``notes["tune:<own>"]``, so the shared settings and the other method's tuning stay as they were;
    without it a tuned objective or context setting is shared, and no method keeps its own value of it.
    The forward-only search's ``zo`` / ``quant`` settings are always its own (``methods.mobiedit``)."""
    from .profile import PROFILE_SECTIONS, ModelProfile, read_profile

    old = read_profile(model_dir) or ModelProfile(edit_layer=row["layer"])
    sections = {name: dict(getattr(old, name)) for name in TUNABLE_SECTIONS}
    methods = {m: {k: dict(v) for k, v in secs.items()} for m, secs in old.methods.items()}
    for key, value in row["settings"].items():
        section, *path = key.split(".")
        if section in PROFILE_SECTIONS and not own:  # shared now: no method keeps its own value of it
            for secs in methods.values():
                _drop(secs, [section, *path])
        node = methods.setdefault(own, {}).setdefault(section, {}) if own and section in PROFILE_SECTIONS + _OWN \
            else sections[section]
        for p in path[:-1]:
            node = node.setdefault(p, {})
        node[path[-1]] = value
    methods = {m: secs for m, secs in methods.items() if secs}
    reason = old.layer_reason if row["layer"] == old.edit_layer else \
        f"mobiedit tune ({method_row}, {tuning['n']} known requests): the best score at layer {row['layer']}"
    note = f"tune:{own}" if own else "tune"
    return replace(old, edit_layer=row["layer"], layer_reason=reason, **sections, methods=methods,
                   notes={**old.notes, note: tuning})


def _drop(tree: dict, path: list[str]) -> None:
    """Remove ``path`` from the nested dict ``tree`` and every object it leaves empty."""
    if len(path) == 1:
        tree.pop(path[0], None)
    elif isinstance(tree.get(path[0]), dict):
        _drop(tree[path[0]], path[1:])
        if not tree[path[0]]:
            del tree[path[0]]


def cmd_tune(args) -> int:
    from .atomic import atomic_write_text
    from .bench import request_slice
    from .bench_rows import ROWS
    from .digest import files_sha256
    from .profile import read_profile, write_profile
    from .requests import load_requests
    from .resolve import edit_layer_for, layer_list, request_file, resolve_model
    from .tune_plot import plot

    if args.method not in ROWS:
        raise ConfigError(f"unknown bench row {args.method!r}", where="--method", fix=f"use one of {sorted(ROWS)}")
    if args.n < 1:
        raise ConfigError(f"--n must be >= 1, got {args.n}", where="--n", fix="e.g. --n 16")
    grid = parse_grid(args.grid if args.grid is not None else list(DEFAULT_GRID))
    if ROWS[args.method][0] == "rome" and any(k == "success.nll" or k.startswith(("settle.", "zo.")) for k, _ in grid):
        raise ConfigError("success.nll, settle.* and zo.* are the forward-only search's stop margin, settle phase and "
                          "estimator; ROME's search stops on its loss", where="--grid",
                          fix="tune them with a MobiEdit row, e.g. --method mobiedit")
    own_keys = [k for k, _ in grid if k.split(".")[0] in _OWN]
    if own_keys and (args.scope != "method" or ROWS[args.method][0] != "mobiedit"):
        raise ConfigError(f"{own_keys[0]} is the forward-only search's own setting (methods.mobiedit in the profile)",
                          where="--grid", fix="tune it with --method mobiedit --scope method")
    max_ppl = args.max_ppl_change
    if max_ppl is not None and not (math.isfinite(max_ppl) and max_ppl >= 0):
        raise ConfigError(f"--max-ppl-change must be a percentage >= 0, got {max_ppl}", where="--max-ppl-change",
                          fix="e.g. --max-ppl-change 1 (held-out perplexity up by at most 1 % on average)")
    max_drop = args.max_success_drop
    if max_drop is not None and not (math.isfinite(max_drop) and 0 <= max_drop <= 100):
        raise ConfigError(f"--max-success-drop must be points of success rate in 0..100, got {max_drop}",
                          where="--max-success-drop", fix="e.g. --max-success-drop 0 (no candidate that fails more "
                                                         "edits than the current settings), 10 to allow one in ten")
    ability = args.ability or max_ppl is not None
    layers = layer_list(args.layers)
    model_dir = resolve_model(args)
    # the current settings' layer: the profile's; without a profile, the first of --layers
    layer = edit_layer_for(model_dir, layers[0] if layers and read_profile(model_dir) is None else None)
    if args.scope == "method" and set(layers or [layer]) != {layer}:
        raise ConfigError(f"--layers {args.layers} with --scope method: the edit layer is one for every method "
                          f"(the profile's is {layer})", where="--scope",
                          fix="tune the layer with --scope shared, or leave --layers out")
    layers = layers or [layer]
    req_file = request_file(args.requests, model_dir)
    total = len(load_requests(req_file))
    offset = args.offset if args.offset is not None else total - args.n
    if offset < 0 or offset + args.n > total:
        raise ConfigError(f"requests {offset}..{offset + args.n} are not all in {req_file.name} ({total})",
                          where="--offset", fix=f"use --n <= {total} and --offset <= {total} - n")
    cands = distinct(candidates(layer, layers, grid), args.method, args.seed, model_dir)  # before --out exists
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(f"tuning {model_dir.name}: {len(cands)} candidates x {args.n} requests ({req_file.name} from {offset}), "
          f"row {args.method}")
    print(HEADER)
    table = run_tune(model_dir, req_file, args.method, layer, cands, args.n, offset, args.seed, out, not args.quiet,
                     args.score, ability)
    best = best_index(table, max_ppl, max_drop)
    for i, row in enumerate(table):
        if not keeps_success(row, table[0], max_drop):
            print(f"#{i} not chosen: success {row['success_rate']:.1f} % against the current settings' "
                  f"{table[0]['success_rate']:.1f} % (--max-success-drop {max_drop:g})")
    if max_ppl is not None and not within_budget(table[best], max_ppl):
        print(f"no candidate keeps the mean perplexity change within {max_ppl:g} %: the current settings stay")
    case_ids = [r.case_id for r in request_slice(req_file, args.n, offset)]
    tuning = {"method": args.method, "n": args.n, "offset": offset, "requests": req_file.name,
              "requests_sha256": files_sha256([req_file]), "case_ids": case_ids, "seed": args.seed,
              "score": score_label(args.score), **({"max_ppl_change": max_ppl} if max_ppl is not None else {}),
              **({"max_success_drop": max_drop} if max_drop is not None else {}),
              "chosen": best, "table": [note_row(r) for r in table]}
    atomic_write_text(out / "tune.json", json.dumps({"model": str(model_dir), **tuning, "rows": table}, indent=1))
    why = [f"mean ppl change > {max_ppl:g} %" if max_ppl is not None else "",
           f"success < current's - {max_drop:g} pts" if max_drop is not None else ""]
    plot(table, best, out / "tune.png", f"mobiedit tune {model_dir.name} ({args.method}, {args.n} requests)",
         SCORES[args.score], [eligible(r, table, max_ppl, max_drop) for r in table], " or ".join(w for w in why if w))
    print(f"chosen: #{best} — {format_line(best, table[best]).split(None, 1)[1]}")
    print(f"wrote {out / 'tune.json'} and {out / 'tune.png'}")
    if args.write_profile:
        own = ROWS[args.method][0] if args.scope == "method" else None
        print(f"wrote {write_profile(model_dir, tuned_profile(model_dir, table[best], args.method, tuning, own))}")
    return 0


def register(sub) -> None:
    sp = sub.add_parser("tune", help="choose a model's edit layer, objective and success settings on requests it knows "
                                     "(writes the profile with --write-profile)")
    add_model_args(sp)
    sp.add_argument("--requests", help="requests the model knows (default: the model profile's `requests`; else bundled CounterFact 1k)")
    sp.add_argument("--n", type=int, default=16, help="tuning requests per candidate")
    sp.add_argument("--offset", type=int, help="first tuning request (default: the file's last n, apart from a bench's)")
    sp.add_argument("--method", default="rome-lean", help="the bench row that edits (default rome-lean: the shared "
                                                        "objective by exact gradients through the prefix graph)")
    sp.add_argument("--layers", help="comma-separated layers to try (default: the profile's)")
    sp.add_argument("--grid", action="append", metavar="KEY=V1,V2",
                    help="a setting and its values, KEY under objective., context., success. or settle. (or the "
                         "forward-only search's own zo. and quant., with --method mobiedit --scope method); repeatable "
                         f"(default: {' '.join(DEFAULT_GRID)})")
    sp.add_argument("--seed", type=int, default=0, help="seed of the context templates and the searches")
    sp.add_argument("--score", choices=sorted(SCORES), default="prob",
                    help="rank by the harmonic mean of efficacy, generalization and locality, efficacy and "
                         "generalization as P(new) > P(true) (prob, the default) or as the greedy answer (answers)")
    sp.add_argument("--ability", action="store_true",
                    help="measure general ability too (held-out perplexity and fluency before and after each edit)")
    sp.add_argument("--max-ppl-change", type=float, metavar="PCT",
                    help="choose only a candidate whose mean held-out perplexity change is at most PCT %% "
                         "(implies --ability), e.g. 1")
    sp.add_argument("--max-success-drop", type=float, default=0.0, metavar="PTS",
                    help="choose only a candidate whose success rate (edits the edited model says) is at most PTS "
                         "points below the current settings' (default 0: never one that fails more edits)")
    sp.add_argument("--out", default="runs/tune", help="folder for the sweep's JSON and PNG")
    sp.add_argument("--write-profile", action="store_true", help="write the chosen settings into the model's profile")
    sp.add_argument("--scope", choices=("shared", "method"), default="shared",
                    help="where --write-profile puts objective and context settings: the profile's shared sections "
                         "(every method; the default) or the --method's own (`methods.rome` / `methods.mobiedit`), "
                         "when each search is tuned to its own value")
    sp.set_defaults(fn=cmd_tune)
