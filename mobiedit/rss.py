"""Resident memory of this process: its peak (for benchmarks), and handing pages back."""
from __future__ import annotations

import resource
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def peak_rss_mb() -> float:
    """This process's peak RSS in MiB: ``VmHWM`` of its own address space where Linux reports it.

    Not ``ru_maxrss`` alone: Linux carries the parent's high-water mark into a forked child and
    across ``execve``, so a child spawned by a process that once held a large model would report
    the parent's peak as its own. Elsewhere ``ru_maxrss`` (KiB on Linux/BSD) is the fallback.
    """
    got = _status_mb("VmHWM")
    return got if got is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def rss_mb() -> float | None:
    """This process's resident set now (``VmRSS``, MiB); None where Linux does not report it."""
    return _status_mb("VmRSS")


def _status_mb(key: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return None


def return_freed_memory() -> bool:
    """Make glibc hand every freed block of ≥ 1 MiB back to the OS (``mallopt(M_MMAP_THRESHOLD)``).

    glibc raises its mmap threshold each time a large block is freed, after which blocks of that
    size come from the heap and stay resident once freed — peak RSS then counts dead tensors.
    A fixed threshold keeps large tensors in their own mappings. Benchmarks call this in every
    measured child alike. Returns False where it does not apply (not glibc).
    """
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        libc = ctypes.CDLL(name)
        return bool(libc.mallopt(-3, 1 << 20))  # M_MMAP_THRESHOLD = -3
    except (OSError, AttributeError):
        return False


MADV_PAGEOUT = 21  # Linux ≥ 5.4: reclaim the range now; contents are kept (re-read or swapped in)


def _leaves(t: "torch.Tensor") -> list:
    """The plain tensors holding ``t``'s data (a tensor subclass such as torchao's Int8Tensor
    holds its int8 values and scales in inner tensors named by ``__tensor_flatten__``)."""
    import torch  # here, not at import: the torch-free hosts (bench_shape_ort) read peak RSS too

    if type(t) not in (torch.Tensor, torch.nn.Parameter) and hasattr(t, "__tensor_flatten__"):
        names, _ = t.__tensor_flatten__()
        return [leaf for n in names for leaf in _leaves(getattr(t, n))]
    return [t]


def _file_maps() -> list[tuple[int, int]]:
    """Address ranges of this process's file-backed mappings (Linux ``/proc/self/maps``)."""
    out = []
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                parts = line.split(maxsplit=5)
                if len(parts) == 6 and parts[5].startswith("/"):
                    lo, hi = parts[0].split("-")
                    out.append((int(lo, 16), int(hi, 16)))
    except OSError:
        pass
    return out


def file_backed_ranges(tensors) -> list[tuple[int, int]]:
    """Page-aligned address ranges, inside ``tensors``' data, that lie in a file mapping (the
    weights of an mmap'd safetensors checkpoint). Ranges of anonymous memory are left out:
    handing those back would mean swapping, not re-reading a file."""
    import mmap

    page, maps, out = mmap.PAGESIZE, _file_maps(), []
    for t in tensors:
        for leaf in _leaves(t):
            if not leaf.is_contiguous() or leaf.device.type != "cpu":
                continue  # only a tensor's own dense extent (a storage may span the whole file)
            a = leaf.data_ptr()
            b = a + leaf.numel() * leaf.element_size()
            lo, hi = -(-a // page) * page, b // page * page  # whole pages only, inward
            if hi > lo and any(m0 <= lo and hi <= m1 for m0, m1 in maps):
                out.append((lo, hi))
    return out


def page_out(ranges: list[tuple[int, int]]) -> int:
    """``madvise(MADV_PAGEOUT)`` on ``ranges``: the kernel drops those pages from this process's
    resident set now and reads them back from the file on the next touch. Non-destructive (no
    data is discarded, unlike ``MADV_DONTNEED``). Returns the bytes advised (0 where unsupported)."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if not ranges or name is None:
        return 0
    libc = ctypes.CDLL(name, use_errno=True)
    libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    done = 0
    for lo, hi in ranges:
        if libc.madvise(lo, hi - lo, MADV_PAGEOUT) == 0:
            done += hi - lo
    return done
