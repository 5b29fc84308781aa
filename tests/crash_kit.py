"""Shared pieces of the crash-safety tests (test_crash_safety*.py): run a writer in a forked child
that SIGKILLs itself at its n-th filesystem commit call, and count a writer's commit calls."""
from __future__ import annotations

import os
import time

import pytest

from mobiedit import atomic
from tools.reliability.killtest import Forked, arm_crash_point


def run_killed_at(n: int, after: bool, write, fallback: bool = False, timeout: float = 60.0) -> int:
    """Run ``write()`` in a forked child that SIGKILLs itself at its n-th commit call; return the
    child's exit code (-9 when killed, 0 when the write finished first)."""
    def child():
        if fallback:
            atomic._exchange = lambda a, b: False
        arm_crash_point(n, after)
        write()
        os._exit(0)

    proc = Forked(child)
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            pytest.fail("writer child hung")
        time.sleep(0.002)
    return proc.rc


def count_calls(write, fallback: bool = False) -> int:
    """The number of commit calls ``write()`` makes, run to completion in a forked child."""
    r, w = os.pipe()

    def child():
        if fallback:
            atomic._exchange = lambda a, b: False
        arm_crash_point(-1, False, w)
        write()
        os._exit(0)

    proc = Forked(child)
    os.close(w)
    data = b""
    while chunk := os.read(r, 4096):
        data += chunk
    os.close(r)
    assert proc.wait() == 0
    return len(data)
