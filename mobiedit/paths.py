"""Where the project keeps per-user caches (converted checkpoints, fact LMs, key statistics)."""
from __future__ import annotations

import os
from pathlib import Path


def cache_root() -> Path:
    """``$MOBIEDIT_CACHE`` or ``$XDG_CACHE_HOME/mobiedit`` or ``~/.cache/mobiedit``."""
    env = os.environ.get("MOBIEDIT_CACHE")
    if env:
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "mobiedit"
