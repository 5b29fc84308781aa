"""Layers the loop never runs leave the resident set: layers ≤ l, paged out.

The prefix-reusing loop runs only layers > l (:class:`~mobiedit.forward.graph.PrefixGraph` adds
the delta to layer l's output, which the prefix state holds together with everything below, see
:mod:`mobiedit.forward.prefix`). Layers ≤ l run a handful of times per edit (context templates,
prefix state, the key k*) and never inside the loop, so on a phone their weights need not stay
resident. :func:`layers_paged_out` hooks each module of those layers: right after
it runs, its file-backed weight pages (an mmap'd pre-quantized checkpoint) are handed back to the
kernel with ``MADV_PAGEOUT`` (:func:`mobiedit.rss.page_out`) and are read back from the file the
next time it runs. Nothing is discarded — the weights stay bit-identical — and weights in
anonymous memory (an in-memory quantized copy) are never touched, so there is no swapping.
"""
from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator

import torch

from ..families import Family, get_module
from ..rss import file_backed_ranges, page_out

log = logging.getLogger(__name__)


@contextlib.contextmanager
def layers_paged_out(model: torch.nn.Module, family: Family, layer: int) -> Iterator[int]:
    """While active, each module of decoder layers ``0..layer`` (inclusive) of ``model`` pages its
    file-backed weights out after each forward. Yields the bytes it covers (0: nothing
    file-backed, a no-op)."""
    handles, total = [], 0
    for i in range(layer + 1):
        for mod in get_module(model, family.layer, i).modules():  # per linear: one matrix resident at a time
            ranges = file_backed_ranges(list(mod.parameters(recurse=False)) + list(mod.buffers(recurse=False)))
            if not ranges:
                continue
            total += sum(hi - lo for lo, hi in ranges)
            page_out(ranges)  # whatever loading touched

            def hook(_m, _args, _out, ranges=ranges):
                page_out(ranges)

            handles.append(mod.register_forward_hook(hook))
    log.debug("paging out %.1f MB of layers 0..%d after use", total / 2**20, layer)
    try:
        yield total
    finally:
        for h in handles:
            h.remove()
