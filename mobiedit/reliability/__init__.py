"""Reliability harnesses (docs/reliability.md).

* :mod:`~mobiedit.reliability.fuzz` — fuzz targets for every reader of untrusted input (request
  loaders, journal reader, native engine buffers) and ``python -m mobiedit.reliability.fuzz``.
* :mod:`~mobiedit.reliability.killtest` — SIGKILL crash-safety harness for the writers
  (``mobiedit edit --out``, journal appends and undos, ``mobiedit edit --bundle``) and
  ``python -m mobiedit.reliability.killtest``; its parts: kill_proc (process plumbing),
  kill_writers (edit and journal writers), kill_bundle (the bundle writer), kill_harness.
* :mod:`~mobiedit.reliability.sequential` — many sequential edits with the journal: retention,
  locality drift, bit-exact undo; ``python -m mobiedit.reliability.sequential``.
"""
