"""Method configurations as YAML: nested dataclasses ⇄ plain dicts, validated on load.

Unknown keys are errors naming their dotted path (a typo must not be silently ignored).
"""
from __future__ import annotations

import dataclasses
import numbers
import re
import typing
from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError


# the success rule's value checks (re-exported by mobiedit.recipes, whose SuccessCriterion uses them; here,
# in the base layer, so that a model profile's ``success`` section is checked by the same rule)
def check_fraction(value: float, where: str) -> None:
    """Refuse a success fraction outside [0, 1] (``where``: the field's dotted name)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not (0.0 <= value <= 1.0):
        name = where.rpartition(".")[2]
        raise ConfigError(f"{name}={value!r} out of [0, 1]", where=where,
                          fix="e.g. 0.75 (plain prompt and 3/4 of the context-templated prompts)")


def check_nll(value: float, where: str) -> None:
    """Refuse a loss margin that is not a number > 0 (``where``: the field's dotted name)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        name = where.rpartition(".")[2]
        raise ConfigError(f"{name}={value!r} must be > 0", where=where,
                          fix="e.g. 0.5 (geometric-mean P(target) >= 0.6)")


def to_dict(cfg: Any) -> Any:
    """A dataclass (recursively) as plain Python data; tuples become lists."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: to_dict(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, (list, tuple)):
        return [to_dict(x) for x in cfg]
    return cfg


def _tuplify(value: Any) -> Any:
    return tuple(_tuplify(v) for v in value) if isinstance(value, list) else value


_SCALARS = {float: (int, float), int: (int,), bool: (bool,), str: (str,)}


def _check_scalar(hint: Any, value: Any, where: str) -> None:
    """A field declared ``float`` / ``int`` / ``bool`` / ``str`` gets a value of that type (an int
    is a float too; a bool is not a number): ConfigError naming the field otherwise."""
    ok = _SCALARS.get(hint)
    if ok is None:
        return
    if not isinstance(value, ok) or (hint is not bool and isinstance(value, bool)):
        raise ConfigError(f"expected {hint.__name__}, got {type(value).__name__} {value!r}", where=where,
                          fix=f"write a {hint.__name__} value" + (", e.g. 0.01 or 1e-2" if hint is float else ""))


def merge(base: Any, data: Any, path: str = "") -> Any:
    """``base`` (a dataclass instance) with the partial mapping ``data`` merged over it.

    OmegaConf-style structured merge: a key absent from ``data`` keeps ``base``'s value, a nested
    mapping is merged over ``base``'s nested dataclass (``{"zo": {"lr": 0.3}}`` changes one field of
    the current ``zo`` and keeps its estimator, directions and budget), any other value replaces
    the field (lists become tuples). Unknown keys raise a :class:`ConfigError` naming their dotted
    path; the result is validated by the dataclass's own ``__post_init__``."""
    cls = type(base)
    if not isinstance(data, dict):
        raise ConfigError(f"expected a mapping, got {type(data).__name__}", where=path or "config",
                          fix="write key: value pairs")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(data) - names, key=str)
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown}", where=path or cls.__name__,
                          fix=f"valid keys: {sorted(names)}")
    changes = {}
    for key, value in data.items():
        sub = f"{path}.{key}" if path else key
        current = getattr(base, key)
        if dataclasses.is_dataclass(hints[key]) and dataclasses.is_dataclass(current):
            changes[key] = merge(current, value, sub)
        else:
            _check_scalar(hints[key], value, sub)
            changes[key] = _tuplify(value)
    try:
        return dataclasses.replace(base, **changes)
    except TypeError as e:
        raise ConfigError(str(e), where=path or cls.__name__, fix="check the value types") from None


def from_dict(cls: type, data: Any, path: str = "") -> Any:
    """Dataclass ``cls`` from a partial mapping: :func:`merge` over ``cls()``'s defaults."""
    return merge(cls(), data, path)


class _Loader(yaml.SafeLoader):
    """PyYAML's safe loader, but ``1e-4`` and ``2E+3`` are floats as in YAML 1.2 and JSON (YAML 1.1,
    which PyYAML follows, wants a dot: ``1.0e-4``; ``nullspace_threshold: 1e-4`` would be a string)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def read_yaml(path: str | Path) -> Any:
    """The mapping of a YAML config file (a partial config; :func:`merge` checks it)."""
    try:
        loader = _Loader(Path(path).read_text())  # a SafeLoader: no Python objects from a config file
        try:
            return loader.get_single_data() or {}
        finally:
            loader.dispose()
    except (OSError, yaml.YAMLError) as e:
        raise ConfigError(f"cannot read YAML ({str(e).splitlines()[0]})", where=str(path),
                          fix="pass a readable YAML file") from None


def load_yaml(cls: type, path: str | Path) -> Any:
    """Read a YAML file into dataclass ``cls``."""
    return from_dict(cls, read_yaml(path))
