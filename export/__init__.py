"""Lowering forward-only graphs to ExecuTorch and ONNX; phone bundles. Installed as ``mobiedit.export``.

Public API (imported lazily, so ``import mobiedit.export`` stays cheap):

* configs: :class:`ExportConfig` and its sections (``mobiedit.export.config``);
* bundles: :func:`export_bundle`, :func:`load_bundle`, :class:`Bundle`;
* on-bundle operations: :func:`run_bundle`, :func:`bundle_tokens`, :func:`edit_bundle`,
  :func:`undo_bundle_edit`;
* programs: :class:`StepModule`, :class:`PrefixModule`, :class:`EditModule` (``.graphs``),
  runtimes (``.runtime``), the graph lint (``.lint``), the benchmark (``.bench``).

See docs/export.md for the pipeline and docs/bundle_format.md for the bundle format.
"""
from __future__ import annotations

import importlib

_EXPORTS = {
    "ExportConfig": "config", "InferenceShapes": "config", "EditShapes": "config", "QuantizeConfig": "config",
    "LowerConfig": "config", "EditSetup": "config",
    "export_bundle": "bundle", "load_bundle": "bundle", "Bundle": "bundle", "FORMAT_VERSION": "bundle",
    "run_bundle": "ops", "bundle_tokens": "ops", "edit_bundle": "ops", "undo_bundle_edit": "ops",
    "BundleEditResult": "ops",
    "StepModule": "graphs", "PrefixModule": "graphs", "EditModule": "graphs",
    "open_program": "runtime", "LintConfig": "lint", "lint_exported": "lint", "lint_onnx": "lint",
    "bench_export": "bench",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
