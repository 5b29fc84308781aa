"""Reliability harnesses (docs/reliability.md).

* :mod:`~mobiedit.reliability.fuzz` — fuzz targets for every reader of untrusted input (request
  loaders, journal reader, native engine buffers) and ``python -m mobiedit.reliability.fuzz``.
* :mod:`~mobiedit.reliability.killtest` — SIGKILL crash-safety harness for the writers
  (``mobiedit edit --out``, journal appends) and ``python -m mobiedit.reliability.killtest``.
* :mod:`~mobiedit.reliability.sequential` — many sequential edits with the journal: retention,
  locality drift, bit-exact undo; ``python -m mobiedit.reliability.sequential``.
"""
