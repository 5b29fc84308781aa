"""Strict JSON for untrusted files: duplicate keys refused, parser limits turned into one error type.

Python's ``json`` keeps the *last* of two equal keys, so ``{"slots": 1, "slots": 10}`` silently
means 10; a hand-edited or hostile file can hide a value that way. :func:`loads_strict` refuses
duplicates, and every way the parser can fail on hostile text — malformed JSON, a number of more
than 4 300 digits (Python's int-parsing limit raises ``ValueError``), nesting deep enough to raise
``RecursionError``, a ``"\\ud800"`` escape that decodes to a lone surrogate (a string no later
rewrite of the file could encode as UTF-8) — surfaces as :class:`JSONProblem` (a ``ValueError``)
with a one-line message.
Callers wrap it in their own named error (``RequestError``, ``JournalError``, ``BundleError``,
``ModelLoadError``) with the path.
"""
from __future__ import annotations

import json
import re
from typing import Any

#: a \\uD800-\\uDFFF escape; a pair of them may be one valid character, so a match is checked further
_LONE_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
#: what a reader says of a string with a lone surrogate, and the fix (one wording for every reader)
LONE_SURROGATE = "holds a lone surrogate escape such as \\ud800 (not Unicode text)"
LONE_SURROGATE_FIX = "write the character itself or a valid surrogate pair"


class JSONProblem(ValueError):
    """Text that is not acceptable JSON (malformed, duplicate key, too deep, number too long)."""


class DuplicateKeyError(JSONProblem):
    """Well-formed JSON with two equal keys in one object."""


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise DuplicateKeyError(f"duplicate key {key[:80]!r} in one object (JSON keeps only the last)")
        out[key] = value
    return out


def has_lone_surrogate(value: str) -> bool:
    """True when ``value`` holds a surrogate code point that is not Unicode text (not UTF-8 encodable)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def loads_strict(text: str, *, lone_surrogates: bool = False) -> Any:
    """Parse ``text`` like ``json.loads`` but refuse duplicate object keys.

    ``lone_surrogates`` True leaves lone surrogate escapes to the caller (a reader that names the
    field holding one, as the request reader does); by default they are refused here.

    Raises:
        JSONProblem: malformed JSON, a duplicate key, nesting too deep, an integer too long to
            parse, or a lone surrogate escape; the message is one line.
    """
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates)
    except JSONProblem:
        raise
    except RecursionError:
        raise JSONProblem("nested too deeply") from None
    except ValueError as e:  # JSONDecodeError, and the int-digits limit
        raise JSONProblem(" ".join(str(e).split())[:200]) from None
    if not lone_surrogates and _LONE_SURROGATE_ESCAPE.search(text):  # only an escape puts one in parsed text
        if has_lone_surrogate(json.dumps(obj, ensure_ascii=False)):
            raise JSONProblem(f"a string {LONE_SURROGATE}; {LONE_SURROGATE_FIX}")
    return obj
