"""The rows of ``mobiedit sequential``: named method configurations, each run as its own sequential
session from the unedited model over the same requests (a table of overrides, not code branches).

Built-in rows (:data:`ROWS`):

* ``rome-plain`` / ``mobiedit-plain`` — the method with one clamp, the objective's
  (``update.clamp_ladder: [clamp_norm_factor]``: no ladder);
* ``rome`` / ``mobiedit`` — the method as a sequential session runs it: the clamp ladder of
  :func:`mobiedit.session.sequential_config` (applied to every row that has no ladder of its own);
* ``rome-nullspace`` — ROME with ``update.rule: nullspace`` (and the ladder).

A custom row is ``NAME=METHOD[:CONFIG.yaml]``: the method's defaults with the YAML merged over them
(:func:`mobiedit.resolve.method_config`), then the sequential ladder unless the YAML names one.
Any row ending in ``@N`` (``rome@10``) edits in batches of N, one solve per batch
(:mod:`mobiedit.batch`); its name keeps the suffix.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from .errors import ConfigError

DEFAULT_ROWS = "rome-plain,rome,mobiedit"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+-]*$")


@dataclass(frozen=True)
class SeqRow:
    """One row: its ``name``, ``method`` (a key of :data:`mobiedit.methods.METHODS`), an optional
    YAML ``config`` merged over the method's defaults, ``overrides`` (a partial config mapping merged
    after it), ``single_clamp`` (the ladder is the objective's clamp alone) and ``batch`` (edits
    per solve, :mod:`mobiedit.batch`; 1: one after another)."""

    name: str
    method: str
    config: str | None = None
    overrides: dict[str, Any] = field(default_factory=dict)
    single_clamp: bool = False
    batch: int = 1


ROWS: dict[str, SeqRow] = {r.name: r for r in (
    SeqRow("rome-plain", "rome", single_clamp=True),
    SeqRow("rome", "rome"),
    SeqRow("mobiedit", "mobiedit"),
    SeqRow("mobiedit-plain", "mobiedit", single_clamp=True),
    SeqRow("rome-nullspace", "rome", overrides={"update": {"rule": "nullspace"}}),
)}


def _row_error(message: str) -> ConfigError:
    """A ``--rows`` error whose fix lists the valid row names and the custom form."""
    return ConfigError(message, where="--rows",
                       fix=f"use names from {sorted(ROWS)} or NAME=METHOD[:CONFIG.yaml], each optionally "
                           "followed by @N (batches of N), comma-separated")


def _method_names() -> list[str]:
    """The method names (imported here: the methods package loads torch)."""
    from .methods import METHODS

    return sorted(METHODS)


def parse_row(text: str) -> SeqRow:
    """One ``--rows`` item: a built-in name, or ``NAME=METHOD[:CONFIG.yaml]``, optionally ``@N``.

    Raises:
        ConfigError: unknown name, malformed custom row, or unknown method (``where="--rows"``).
    """
    text = text.strip()
    if "@" in text:
        head, _, size = text.rpartition("@")
        if not size.isdigit() or int(size) < 1:
            raise _row_error(f"row {text!r}: the batch size after '@' must be an integer >= 1")
        row = parse_row(head)
        return replace(row, name=f"{row.name}@{int(size)}", batch=int(size))
    if "=" not in text:
        if text not in ROWS:
            raise _row_error(f"unknown row {text!r}")
        return ROWS[text]
    name, _, spec = text.partition("=")
    method, _, config = spec.partition(":")
    if not _NAME.match(name):
        raise _row_error(f"row name {name!r} must be letters, digits, '_', '.', '+' or '-'")
    if method not in _method_names():
        raise _row_error(f"row {name!r}: unknown method {method!r} (methods: {_method_names()})")
    return SeqRow(name, method, config or None)


def parse_rows(text: str) -> list[SeqRow]:
    """The rows of a comma-separated ``--rows`` value, in order; names must be distinct.

    Raises:
        ConfigError: an empty list, a duplicate name or a bad item (``where="--rows"``).
    """
    rows = [parse_row(item) for item in text.split(",") if item.strip()]
    if not rows:
        raise _row_error("no rows given")
    names = [r.name for r in rows]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise _row_error(f"row name(s) {dup} given twice")
    return rows


def rows_from_args(rows: str | None, method: str | None, config: str | None) -> list[SeqRow]:
    """The run's rows: ``--rows``, or the one row of the single-method form ``--method M
    [--config C]`` (``--config`` alone: method ``rome``), or :data:`DEFAULT_ROWS`.

    Raises:
        ConfigError: ``--rows`` together with ``--method`` / ``--config``, or a bad row.
    """
    if rows is not None and (method or config):
        raise ConfigError("--rows and --method/--config are two ways to name the rows", where="--rows",
                          fix="give a config in the row: --rows NAME=METHOD:CONFIG.yaml")
    if rows is not None:
        return parse_rows(rows)
    if not (method or config):
        return parse_rows(DEFAULT_ROWS)
    method = method or "rome"
    if config is None:
        return [ROWS[method]] if method in ROWS else [parse_row(f"{method}={method}")]
    return [parse_row(f"{method}+{Path(config).stem}={method}:{config}")]


def row_config(row: SeqRow, layer: int, seed: int, model_dir: str | Path, n_edits: int) -> Any:
    """The method config ``row`` runs: :func:`~mobiedit.resolve.method_config` (profile, YAML,
    layer, seed), the row's overrides, the single clamp of a plain row, then
    :func:`~mobiedit.session.sequential_config` for ``n_edits`` edits."""
    from .config_io import merge
    from .resolve import method_config
    from .session import sequential_config

    cfg = method_config(row.method, layer, row.config, seed, model_dir)
    if row.overrides:
        cfg = merge(cfg, row.overrides)
    if row.single_clamp:
        cfg = merge(cfg, {"update": {"clamp_ladder": [cfg.objective.clamp_norm_factor]}})
    return sequential_config(cfg, n_edits)
