"""The ``native`` backend of :func:`mobiedit.zo.run_zo`: configures and drives ``mobiedit._native``.

Contract: same inputs, outputs and errors as :func:`mobiedit.zo.loop.run_python` (both coerce
callback results with :func:`~mobiedit.zo.loop.coerce_losses`), computed by the C++ engine. A
missing extension raises :class:`MobiEditError` with build instructions — there is no silent
fallback to the Python backend.
"""
from __future__ import annotations

import importlib
import logging
from types import ModuleType
from typing import Any, Optional

import numpy as np

from mobiedit.errors import MobiEditError
from mobiedit.zo.config import ZOConfig, ZOResult, ZOStatus
from mobiedit.zo.loop import Check, Forward, coerce_losses, coerce_x0

log = logging.getLogger(__name__)

BUILD_FIX = ("build it from the repository root with `.venv/bin/pip install --no-build-isolation "
             "-e .` (or `make venv`), or pass backend='python'")


def load_native() -> ModuleType:
    """Import and return ``mobiedit._native``.

    Raises:
        MobiEditError: if the extension is not built / not importable (says how to build it).
    """
    try:
        return importlib.import_module("mobiedit._native")
    except ImportError as exc:
        raise MobiEditError(f"the native extension mobiedit._native is not available ({exc})",
                            where="backend='native'", fix=BUILD_FIX) from exc


def native_config(native: ModuleType, cfg: ZOConfig) -> Any:
    """Return a ``mobiedit._native.Config`` with every field of ``cfg`` copied over."""
    ncfg = native.Config()
    for name, value in cfg.as_dict().items():
        setattr(ncfg, name, value)
    return ncfg


def run_native(forward: Forward, check: Optional[Check], x0: Any, cfg: ZOConfig) -> ZOResult:
    """Run the loop in the C++ engine (spec §4); see :func:`mobiedit.zo.run_zo`."""
    native = load_native()
    x = coerce_x0(x0)
    engine = native.Engine(native_config(native, cfg), int(x.shape[0]))
    K = int(engine.K)

    def fwd(D: np.ndarray) -> np.ndarray:
        return coerce_losses(forward(D), K)

    chk = None if check is None else (lambda xc: bool(check(xc)))
    status = engine.run(fwd, chk, x)
    log.info("zo[native] %s after %d steps, %d evals", status, engine.steps, engine.evals)
    return ZOResult(status=ZOStatus(status), x=engine.x, steps=int(engine.steps),
                    evals=int(engine.evals), history=list(engine.history),
                    checks=int(engine.checks), backend="native", message=engine.message)
