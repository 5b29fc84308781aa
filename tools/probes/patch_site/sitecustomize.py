"""Probe-only: with this folder on ``PYTHONPATH`` and ``MEMORY_PROBE=1``, every interpreter — the
bench's spawned row processes included — starts with ``tools/probes/memory_directions.py``'s
estimator patched in (its ``MEMORY_BLOCK`` / ``MEMORY_WARM`` read from the environment)::

    PYTHONPATH=tools/probes/patch_site MEMORY_PROBE=1 MEMORY_BLOCK=1 mobiedit bench ... --out DIR

The row's settings do not record the patch, so it also adds ``"probe": memory_directions.TAG`` to
every row log's identity: the patched command resumes its own logs, a plain run of the same settings
refuses them (and a patched one refuses a plain run's).
"""
import os
import sys
from pathlib import Path

if os.environ.get("MEMORY_PROBE") == "1":
    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from mobiedit.zo import loop as _loop
    from tools.probes import memory_directions as _mem

    from mobiedit import rowlog as _rowlog

    _loop.make_estimator = _mem.make_estimator
    _plain_init = _rowlog.RowLog.__init__

    def _tagged_init(self, path, identity=None, defaults=None):
        if identity is not None:
            identity = {**identity, "probe": _mem.TAG}
        _plain_init(self, path, identity, defaults)

    _rowlog.RowLog.__init__ = _tagged_init
