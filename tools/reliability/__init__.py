"""Reliability harnesses (docs/reliability.md): test tools, not part of the installed package.

Run from the repository root (``python -m tools.reliability.killtest``); pytest finds them through
``pythonpath = ["."]`` (pyproject). They drive the installed ``mobiedit`` as a user would.

* :mod:`~tools.reliability.fuzz` — fuzz targets for every reader of untrusted input (request
  loaders, journal reader, native engine buffers) and ``python -m tools.reliability.fuzz``; its
  parts: fuzz_core (case, classifier, driver), fuzz_requests, fuzz_journal, fuzz_native,
  fuzz_bundle and fuzz_hostile (the targets).
* :mod:`~tools.reliability.killtest` — SIGKILL crash-safety harness for the writers
  (``mobiedit edit --out``, journal appends and undos, ``mobiedit edit --bundle``) and
  ``python -m tools.reliability.killtest``; its parts: kill_proc (process plumbing),
  kill_writers (edit and journal writers), kill_bundle (the bundle writer), kill_harness.
The sequential-editing benchmark is a product feature and stays in the package
(:mod:`mobiedit.sequential`).
"""
