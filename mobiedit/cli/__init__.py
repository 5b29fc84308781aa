"""``mobiedit`` command line: pretrain, edit, eval, trace, bench, sequential, demo (and export/run from mobiedit.export).

Every user error is a :class:`MobiEditError`; it is printed on one line and the exit code is 2.
"""
from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

from ..errors import MobiEditError
from ..quiet import cli_logging, quiet_libraries
from ..termsafe import term_safe
from ._common import Command
from .edit import EDIT, UNDO
from .eval import EVAL
from .model import MODEL, PRETRAIN
from .quantize import QUANTIZE
from .requests import REQUESTS
from .trace import TRACE

#: the verbs defined here, in ``mobiedit --help`` order: name -> (add_arguments, run, help)
COMMANDS: dict[str, Command] = {
    "model": MODEL, "requests": REQUESTS, "pretrain": PRETRAIN, "edit": EDIT, "eval": EVAL, "trace": TRACE,
    "quantize": QUANTIZE, "undo": UNDO,
}


def registrars() -> list[Callable[[Any], None]]:
    """The ``register(subparsers)`` functions of the verbs that live with their subject (bench,
    bench-prefix, bench-quant, bench-shape, demo, tune, sequential, sequential-status; export, run, bench-export, bundle-undo when the
    export package imports), added after :data:`COMMANDS` in this order. None of them imports this
    package. Imported here, not at module level: only a parser build needs them."""
    from ..bench import register as bench
    from ..bench_prefix import register as bench_prefix
    from ..bench_prefix import register_quant as bench_quant
    from ..bench_shape import register as bench_shape
    from ..demo import register as demo
    from ..sequential import register as sequential
    from ..sequential_status import register as sequential_status
    from ..tune import register as tune

    out = [bench, bench_prefix, bench_quant, bench_shape, demo, tune, sequential, sequential_status]
    try:
        from ..export.cli import register as export
    except ImportError:  # the export extra is not installed
        return out
    return out + [export]


def build_parser() -> argparse.ArgumentParser:
    """The ``mobiedit`` parser; each verb's parser carries ``fn`` (its run function)."""
    p = argparse.ArgumentParser(
        prog="mobiedit", description="Edit what a language model knows, forward-only, on the desktop or in a "
        "phone bundle: edit, undo, eval, trace, bench, sequential, export, run, demo.",
        epilog="A bad input prints one line, `mobiedit: error: WHERE: WHAT — fix: HOW`, and exits 2. "
               "`mobiedit demo` shows the whole flow; `mobiedit VERB --help` lists a verb's options.")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = p.add_subparsers(dest="cmd", required=True)
    for name, cmd in COMMANDS.items():
        sp = sub.add_parser(name, help=cmd.help)
        cmd.add_arguments(sp)
        sp.set_defaults(fn=cmd.run)
    for register in registrars():
        register(sub)
    helps = {a.dest: a.help for a in sub._choices_actions}
    for name, sp in sub.choices.items():  # `mobiedit VERB --help` opens with what the verb does
        if not sp.description:
            sp.description = helps.get(name)
    return p


def main(argv: list[str] | None = None) -> int:
    """Run ``mobiedit`` on ``argv`` (default ``sys.argv[1:]``); returns the exit code: the verb's,
    2 for a :class:`MobiEditError` or an unnamed OS error (one line on stderr), 130 on Ctrl-C, 141
    (nothing said) when stdout's reader closed the pipe."""
    quiet_libraries()
    args = build_parser().parse_args(argv)
    cli_logging(args.verbose)
    try:
        return int(args.fn(args) or 0)
    except MobiEditError as e:
        print(f"mobiedit: error: {term_safe(e)}", file=sys.stderr)
        return 2
    except OSError as e:  # a read / write failure the command did not name itself
        if isinstance(e, BrokenPipeError) and _stdout_reader_gone():  # `| head`: stop quietly, as a shell tool does
            return 141  # 128 + SIGPIPE
        from ..outputs import named_os_error

        print(f"mobiedit: error: {term_safe(named_os_error(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("mobiedit: interrupted", file=sys.stderr)
        return 130


def _stdout_reader_gone() -> bool:
    """Whether stdout is a pipe whose reader has closed it; if so, point stdout's descriptor at
    /dev/null, so the interpreter's flush at exit does not raise again (Python's recipe for SIGPIPE)."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        if not any(ev & select.POLLERR for _, ev in poller.poll(0)):
            return False  # the broken pipe was another one: a named error
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
        return True
    except (OSError, ValueError, AttributeError):  # no real descriptor
        return False
