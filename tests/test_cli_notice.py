"""Progress notices (a bench row or tune candidate starting) reach the terminal as plain lines, not
as warnings; warnings keep their level name; info stays hidden unless --verbose."""
from __future__ import annotations

import subprocess
import sys

SCRIPT = """
import logging, sys
from mobiedit.quiet import NOTICE, cli_logging
cli_logging(verbose=len(sys.argv) > 1)
log = logging.getLogger("mobiedit.bench")
log.log(NOTICE, "bench row %s at layer %d", "fzoo", 5)
log.warning("something is off")
log.info("a detail")
"""


def _stderr(*args: str) -> list[str]:
    r = subprocess.run([sys.executable, "-c", SCRIPT, *args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return r.stderr.splitlines()


def test_a_notice_is_a_plain_line_and_a_warning_keeps_its_level():
    assert _stderr() == ["bench row fzoo at layer 5", "WARNING mobiedit.bench: something is off"]


def test_verbose_shows_info_with_its_level():
    assert _stderr("-v") == ["bench row fzoo at layer 5", "WARNING mobiedit.bench: something is off",
                             "INFO mobiedit.bench: a detail"]
