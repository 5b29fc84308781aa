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
