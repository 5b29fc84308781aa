"""The editing methods: ``rome`` (backprop value search) and ``mobiedit`` (forward-only value search),
the verify-after-write check, and what they share (``common``).

:data:`METHODS` is the one table of methods (ROME's ``ALG_DICT``): name → (config dataclass, edit
function). The session, the library API (:mod:`mobiedit.api`) and the CLI look methods up here
instead of branching on names. Every edit function takes ``(lm, request, config, context)`` and
keyword ``on_step``; a forward-only method also takes the keyword ``fwd_model`` (the model its
forwards run on).
"""
from __future__ import annotations

from typing import Any, Callable

from ..editing.config import ROMEConfig
from ..errors import ConfigError
from .common import EditOutcome
from .mobiedit import MobiEditConfig, mobiedit_edit
from .rome import rome_edit

#: method name -> (config dataclass, edit function); the order is the CLI's ``--method`` choices
METHODS: dict[str, tuple[type, Callable[..., EditOutcome]]] = {
    "rome": (ROMEConfig, rome_edit),
    "mobiedit": (MobiEditConfig, mobiedit_edit),
}


def method_entry(name: str) -> tuple[type, Callable[..., EditOutcome]]:
    """``METHODS[name]``.

    Raises:
        ConfigError: ``name`` is not a method; ``where`` is ``method``, the fix lists the names.
    """
    try:
        return METHODS[name]
    except (KeyError, TypeError):
        raise ConfigError(f"unknown method {name!r}", where="method",
                          fix=f"use one of {list(METHODS)}") from None


def method_name(cfg: Any) -> str:
    """The name of the method whose config ``cfg`` is (looked up by type in :data:`METHODS`).

    Raises:
        ConfigError: ``cfg`` is no method's config.
    """
    for name, (cls, _) in METHODS.items():
        if type(cfg) is cls:
            return name
    raise ConfigError(f"{type(cfg).__name__} is no method's config", where="config",
                      fix=f"pass one of {[cls.__name__ for cls, _ in METHODS.values()]}")
