"""Text from files, made safe to print on a terminal (used by every CLI printer).

A request file, a journal or a model's output can hold control characters (NUL, ESC sequences
that move the cursor or recolour the terminal), right-to-left overrides (U+202E turns ``txt.exe``
into ``exe.txt`` on screen) and line separators. :func:`term_safe` replaces each such character
by a visible escape (``\\x00``, ``\\x1b``, ``\\u202e``); ordinary text, including non-Latin
scripts, passes unchanged.
"""
from __future__ import annotations

import re

#: C0 / DEL / C1 controls, bidi embeddings / overrides / isolates / marks, line / paragraph separators
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069\ufeff]")
_UNSAFE_KEEP_LINES = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e"
                                "\u2066-\u2069\ufeff]")


def _escape(m: re.Match) -> str:
    c = ord(m.group(0))
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def term_safe(text: object, keep_newlines: bool = False) -> str:
    """``str(text)`` with control, bidi-override and separator characters escaped.

    ``keep_newlines``: leave ``\\n`` and ``\\t`` as they are (for multi-line output such as
    generated text); every other listed character is still escaped.
    """
    return (_UNSAFE_KEEP_LINES if keep_newlines else _UNSAFE).sub(_escape, str(text))
