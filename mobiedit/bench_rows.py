"""The bench's rows: named method configurations (a table of overrides, not code branches), the
run's ``--set`` overrides over them, and the tuned paper row chosen by a sweep on other requests.

A :class:`RowSpec` is what one row of a run is: a name from :data:`ROWS`, its request count and
the settings applied over its config (``--set [ROW:]KEY=VALUE``, dotted keys, JSON values). Its
log file and label carry the settings, so a resumed log never mixes two configurations.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ConfigError
from .recipes import ANTITHETIC, FZOO, FZOO_GRADIENT, FZOO_LR2, PAPER

# the named recipes' searches (mobiedit.recipes: the only place their numbers are written), as
# override mappings (every field, so a row does not depend on MobiEditConfig's default zo)
_FZOO = dataclasses.asdict(FZOO.zo)
_PAPER = dataclasses.asdict(PAPER.zo)
_ANTI = dataclasses.asdict(ANTITHETIC.zo)
_FZOO_GRAD = dataclasses.asdict(FZOO_GRADIENT.zo)
_W8A16 = {"scheme": "w8a16"}

# name -> (method, config overrides). Each forward-only estimator comes with its three ablations
# (float forward, no prefix reuse, no early stop); "paper" is the paper's own recipe (its early
# stop is loss < 1e-5), "paper-check" the same estimator stopped by our success check.
ROWS: dict[str, tuple[str, dict[str, Any]]] = {
    "rome": ("rome", {}),
    # the forward-only search as `mobiedit edit` runs it on this model: the shipped defaults
    # (recipes.FZOO on W8A16, stopped where the written edit holds — fzoo-stopw's settings) under the
    # model profile's, including what only this search has (methods.mobiedit.zo / quant)
    "mobiedit": ("mobiedit", {}),
    # the same search and objective, backprop through the prefix-reusing graph only (issue 17)
    "rome-lean": ("rome", {"prefix_reuse": True}),
    # both searches on bf16 matmuls (forward.quant "bf16": AMX/AVX512-BF16 kernels, fp32 elsewhere)
    "rome-lean-bf16": ("rome", {"prefix_reuse": True, "quant": {"scheme": "bf16"}}),
    "fzoo-bf16": ("mobiedit", {"zo": _FZOO, "quant": {"scheme": "bf16"}}),
    # the search sees what the write delivers at each row's key (UpdateConfig.written_gain, issue 18)
    "rome-written": ("rome", {"update": {"written_gain": True}}),
    "fzoo-written": ("mobiedit", {"zo": _FZOO, "quant": _W8A16, "update": {"written_gain": True}}),
    # the search stops only where the edited float model says the fact (stop_on "written", issue 18;
    # the shipped rule since session 17, so the same as fzoo — kept for its logs), and on the
    # search's own rule alone (the shipped rule before: fzoo's logs of sessions 15–16)
    "fzoo-stopw": ("mobiedit", {"zo": _FZOO, "quant": _W8A16, "stop_on": "written"}),
    "fzoo-loop": ("mobiedit", {"zo": _FZOO, "quant": _W8A16, "stop_on": "loop"}),
    # coordinate directions, steps sized by the whole gradient (recipes.FZOO_GRADIENT, issue 18)
    "fzoo-grad": ("mobiedit", {"zo": _FZOO_GRAD, "quant": _W8A16, "stop_on": "written",
                               "success_nll": FZOO_GRADIENT.success.nll}),
    # the keys read from the quantized forward copy the search ran on, not the served float model
    "fzoo-searchkeys": ("mobiedit", {"zo": _FZOO, "quant": _W8A16, "update": {"key_source": "search"}}),
    "paper": ("mobiedit", {"zo": _PAPER, "quant": _W8A16, "early_stop": False}),
    "paper-check": ("mobiedit", {"zo": {**_PAPER, "loss_tol": 0.0}, "quant": _W8A16}),
    "fzoo-w8a8": ("mobiedit", {"zo": _FZOO, "quant": {"scheme": "w8a8"}}),
    # the phone checkpoint's configuration (`mobiedit quantize`): LM head stored bf16, computed fp32
    "fzoo-bf16head": ("mobiedit", {"zo": _FZOO, "quant": {"scheme": "w8a16", "head_dtype": "bfloat16"}}),
}
# the authors' estimator stopped by the same success check, 600 steps: its lr in this project's
# units must be swept (issue 17) — paper-lrX rows; the chosen one is reported as paper-tuned
PAPER_LRS = (0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 3.2)
_PAPER600 = {**_PAPER, "max_steps": 600, "max_evals": 9000, "loss_tol": 0.0}
for _lr in PAPER_LRS:
    ROWS[f"paper-lr{_lr:g}"] = ("mobiedit", {"zo": {**_PAPER600, "lr": _lr}, "quant": _W8A16})
# the sweep's choice (--tuned-from): its lr comes in as the run's setting zo.lr; checked every
# step (FZOO's check) or every 20 steps (the authors' code)
ROWS["paper-tuned"] = ("mobiedit", {"zo": _PAPER600, "quant": _W8A16})
ROWS["paper-tuned-c20"] = ("mobiedit", {"zo": {**_PAPER600, "check_every": 20}, "quant": _W8A16})
TUNED_ROWS = ("paper-tuned", "paper-tuned-c20")
# the shipped estimator at a larger Adam lr (issue 17: fewer evaluations at ROME's success rate);
# chosen on 20 requests from offset 800 (runs/explore, docs/results.md), reported on others
ROWS["fzoo-lr1"] = ("mobiedit", {"zo": {**_FZOO, "lr": 1.0}, "quant": _W8A16})
ROWS["fzoo-lr2"] = ("mobiedit", {"zo": dataclasses.asdict(FZOO_LR2.zo), "quant": _W8A16})  # recipes.FZOO_LR2
# the same search on bf16 matmuls (the forward this CPU runs fastest, issue 17 item 4)
ROWS["fzoo-lr2-bf16"] = ("mobiedit", {"zo": dataclasses.asdict(FZOO_LR2.zo), "quant": {"scheme": "bf16"}})
for _name, _zo in (("fzoo", _FZOO), ("antithetic", _ANTI)):
    ROWS[_name] = ("mobiedit", {"zo": _zo, "quant": _W8A16})
    ROWS[f"{_name}-float"] = ("mobiedit", {"zo": _zo, "quant": {"scheme": "none"}})
    ROWS[f"{_name}-noprefix"] = ("mobiedit", {"zo": _zo, "quant": _W8A16, "prefix_reuse": False})
    ROWS[f"{_name}-noearly"] = ("mobiedit", {"zo": _zo, "quant": _W8A16, "early_stop": False})


@dataclass(frozen=True)
class RowSpec:
    """One row of a run: ``name`` (a key of :data:`ROWS`), ``n`` requests, and ``sets`` — (dotted
    key, value) pairs merged over the row's configuration."""

    name: str
    n: int
    sets: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        if self.name not in ROWS:
            raise ConfigError(f"unknown bench row {self.name!r}", where="--rows", fix=f"use some of {sorted(ROWS)}")
        if self.n < 1:
            raise ConfigError(f"request count for row {self.name!r} must be >= 1", where="--rows",
                              fix="use NAME:N, N >= 1")

    @property
    def label(self) -> str:
        """``name`` plus its settings, as tables and the JSON show the row."""
        return self.name + "".join(f" {k}={json.dumps(v)}" for k, v in self.sets)

    @property
    def stem(self) -> str:
        """The row's file stem: ``row-NAME`` (+ a digest of the settings when there are any)."""
        if not self.sets:
            return f"row-{self.name}"
        return f"row-{self.name}-" + hashlib.sha256(json.dumps(self.sets).encode()).hexdigest()[:8]


def parse_sets(items: list[str] | None) -> list[tuple[str | None, str, Any]]:
    """``--set [ROW:]KEY=VALUE`` items -> (row or None for every row, dotted key, value). VALUE
    is read as JSON (``true``, ``0.3``, ``[[5, 5]]``), else kept as a string."""
    out = []
    for item in items or []:
        lhs, eq, raw = item.partition("=")
        row, _, key = lhs.rpartition(":")
        if not eq or not key or any(not part for part in key.split(".")):
            raise ConfigError(f"bad setting {item!r}", where="--set",
                              fix="write [ROW:]KEY=VALUE with a dotted KEY, e.g. update.written_gain=true or fzoo:zo.lr=0.3")
        if row and row not in ROWS:
            raise ConfigError(f"unknown row {row!r} in setting {item!r}", where="--set", fix=f"use one of {sorted(ROWS)}")
        if key == "layer":  # every row runs at the bench's layer; a per-row layer would be replaced
            raise ConfigError(f"the edit layer is the bench's, not a row setting ({item!r})", where="--set",
                              fix="pass --layer N, or --layers 3,4,5 to run every row at each")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        out.append((row or None, key, value))
    return out


def parse_rows(spec: str, n: int, sets: list[tuple[str | None, str, Any]] | None = None) -> list[RowSpec]:
    """``"rome,fzoo,paper:30"`` -> [RowSpec]: a ``:N`` suffix caps that row at N requests (for rows
    too slow to run on all of them); ``sets`` (:func:`parse_sets`) go to every row, or to the one named."""
    out = []
    for item in (x.strip() for x in spec.split(",") if x.strip()):
        name, _, cnt = item.partition(":")
        if name not in ROWS:
            raise ConfigError(f"unknown bench row {name!r}", where="--rows", fix=f"use some of {sorted(ROWS)}")
        try:
            k = int(cnt) if cnt else n
        except ValueError:
            raise ConfigError(f"bad request count {cnt!r} for row {name!r}", where="--rows",
                              fix="write NAME or NAME:N with N a positive integer") from None
        mine = tuple((key, v) for row, key, v in (sets or []) if row in (None, name))
        out.append(RowSpec(name, k, mine))
    if not out:
        raise ConfigError("no rows given", where="--rows", fix=f"name some of {sorted(ROWS)}")
    return out


def _nest(sets: tuple[tuple[str, Any], ...]) -> dict:
    """Dotted settings -> a nested override mapping."""
    out: dict = {}
    for key, value in sets:
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
            if not isinstance(node, dict):
                raise ConfigError(f"setting {key!r} goes below a value set by another setting", where="--set",
                                  fix="set the nested keys one by one")
        node[leaf] = value
    return out


def row_config(name: str, layer: int, seed: int, sets: tuple[tuple[str, Any], ...] = (),
               model_dir: str | Path | None = None):
    """The dataclass config of row ``name`` at ``layer``: the method's defaults, the settings of
    ``model_dir``'s profile (:func:`mobiedit.profile.profile_settings`), the row's overrides, then
    ``sets``, each merged over the last. A setting the row's config does not have raises a
    ConfigError naming the dotted key."""
    from .config_io import merge
    from .editing.config import ROMEConfig
    from .methods.mobiedit import MobiEditConfig

    if name not in ROWS:
        raise ConfigError(f"unknown bench row {name!r}", where="--rows", fix=f"use some of {sorted(ROWS)}")
    method, over = ROWS[name]
    cls = ROMEConfig if method == "rome" else MobiEditConfig
    from .profile import with_profile

    cfg = merge(merge(with_profile(cls(), model_dir, method=method), over, f"row {name}"), _nest(sets), f"row {name}")
    if method == "mobiedit":
        cfg = dataclasses.replace(cfg, zo=dataclasses.replace(cfg.zo, seed=seed))
    return dataclasses.replace(cfg, layer=layer)


def tuned_paper_lr(sweep: Path, case_ids: list[str]) -> tuple[float, dict]:
    """The paper estimator's lr chosen by a sweep run (``mobiedit bench --rows paper-lr0.05,...``,
    its ``bench.json`` or folder): the highest success rate, then the fewest mean loss evaluations
    (failures counted at their budget). The sweep's requests must not overlap ``case_ids`` (the
    reported set). Returns (lr, the sweep's table)."""
    path = sweep / "bench.json" if sweep.is_dir() else sweep
    try:
        res = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"cannot read the sweep's results ({e})", where="--tuned-from",
                          fix="pass the --out folder of a finished `mobiedit bench --rows paper-lr...` run") from None
    rows = [r for r in res.get("rows", []) if str(r.get("row", "")).startswith("paper-lr")]
    if not rows or "case_ids" not in res:
        raise ConfigError(f"{path} holds no paper-lr rows with their request ids", where="--tuned-from",
                          fix="run the sweep with this version: mobiedit bench --rows "
                              + ",".join(f"paper-lr{x:g}" for x in PAPER_LRS) + " --offset 800 --n 20 --out DIR")
    shared = sorted(set(res["case_ids"]) & set(case_ids))
    if shared:
        raise ConfigError(f"the sweep's requests overlap the reported ones ({len(shared)}, e.g. {shared[0]})",
                          where="--tuned-from", fix="sweep on other requests (bench --offset) than the ones reported")
    best = min(rows, key=lambda r: (-r["success_rate"], r["loss_evals_mean"]))
    table = {r["row"]: {"success_rate": r["success_rate"], "loss_evals_mean": r["loss_evals_mean"]} for r in rows}
    return float(best["row"][len("paper-lr"):]), table
