"""Progress notices (a bench row or tune candidate starting) reach the terminal as plain lines, not
as warnings; warnings keep their level name; info stays hidden unless --verbose; a line logged
while a progress bar runs starts on its own line, not after the bar's text."""
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


BAR = """
import logging
from tqdm import tqdm
from mobiedit.quiet import cli_logging
cli_logging()
with tqdm(total=3, desc="export", unit="stage") as bar:
    bar.update(1)
    logging.getLogger("mobiedit.export.bundle").warning("the edit program reads noise")
    bar.update(2)
"""


def test_a_line_logged_under_a_progress_bar_is_not_glued_to_it():
    r = subprocess.run([sys.executable, "-c", BAR], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    # what a terminal shows of each line: the text after its last carriage return
    shown = [line.split("\r")[-1] for line in r.stderr.split("\n")]
    assert "WARNING mobiedit.export.bundle: the edit program reads noise" in shown, r.stderr
