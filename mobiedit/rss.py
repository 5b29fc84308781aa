"""Peak resident memory of this process, for benchmarks."""
from __future__ import annotations

import resource


def peak_rss_mb() -> float:
    """This process's peak RSS in MiB: ``VmHWM`` of its own address space where Linux reports it.

    Not ``ru_maxrss`` alone: Linux carries the parent's high-water mark into a forked child and
    across ``execve``, so a child spawned by a process that once held a large model would report
    the parent's peak as its own. Elsewhere ``ru_maxrss`` (KiB on Linux/BSD) is the fallback.
    """
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


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
