"""Driver machinery of the fuzzer (:mod:`tools.reliability.fuzz`): the :class:`Case` a target builds
for one generated input, the outcome classifier (:func:`classify` — accepted, rejected with a
named project error, named builtin error of the raw extension, or crash), the hypothesis
strategies shared by several targets (``SPECIAL_STRINGS``, ``KEYS``, ``SCALARS``, ``JSON_VALUES``,
:func:`_dumps`), the :class:`Target` record, the :class:`Tally` of outcomes, and the loop that runs
one target (:func:`run_case`, :func:`fuzz_target`, :func:`format_tally`). The targets live in
``fuzz_requests``, ``fuzz_journal``, ``fuzz_native``, ``fuzz_bundle`` and ``fuzz_hostile``; the
target table and the command line in ``fuzz``.
"""
from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

try:
    from hypothesis import HealthCheck, Phase, given, settings
    from hypothesis import seed as hyp_seed
    from hypothesis import strategies as st
except ImportError as exc:  # pragma: no cover - hypothesis is in the [test] extra
    raise ImportError("tools.reliability.fuzz needs hypothesis: pip install -e '.[test]'") from exc

from mobiedit.errors import MobiEditError

# ----------------------------------------------------------------------------- outcome classification

ACCEPTED, REJECTED, BUILTIN, CRASH = "accepted", "rejected", "builtin_named", "crash"
_FIELD = re.compile(r"field '([^']*)'")


@dataclass
class Case:
    """One generated input: ``call`` runs the reader; errors must be ``expected`` and name a
    location; ``fields`` (if given) are the field names an error may name; ``check`` validates
    an accepted result; ``builtin`` lists builtin exception types accepted when their message
    contains one of ``builtin_names`` (raw extension only)."""

    call: Callable[[], Any]
    expected: tuple[type, ...]
    desc: str
    fields: tuple[str, ...] | None = None
    check: Callable[[Any], str | None] | None = None
    builtin: tuple[type, ...] = ()
    builtin_names: tuple[str, ...] = ()


def field_of(err: MobiEditError) -> str | None:
    """The field named in an error's ``where`` (``"... field 'x.y'"``), or None."""
    m = _FIELD.search(err.where or "")
    return m.group(1) if m else None


def _field_matches(got: str, allowed: tuple[str, ...]) -> bool:
    base = got.split("[")[0]
    return any(base == a or base.startswith(a + ".") or a.startswith(base + ".") for a in allowed)


def classify(case: Case) -> tuple[str, str]:
    """Run ``case`` and return (outcome, detail). Never raises (except KeyboardInterrupt)."""
    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            result = case.call()
    except KeyboardInterrupt:
        raise
    except MobiEditError as err:
        text = str(err)
        if not isinstance(err, case.expected):
            return CRASH, f"wrong error type {type(err).__name__}: {text[:300]}"
        if not err.where:
            return CRASH, f"error names no location: {text[:300]}"
        if "\n" in text:
            return CRASH, f"multi-line message: {text[:300]!r}"
        if case.fields is not None:
            got = field_of(err)
            if got is None or not _field_matches(got, case.fields):
                return CRASH, f"error names field {got!r}, expected one of {case.fields}: {text[:300]}"
        return REJECTED, f"{type(err).__name__}: {text[:200]}"
    except BaseException as err:  # noqa: BLE001 - classifying every escape is the point
        if case.builtin and isinstance(err, case.builtin) and not isinstance(err, MobiEditError):
            msg = str(err)
            if any(n in msg for n in case.builtin_names):
                return BUILTIN, f"{type(err).__name__}: {msg[:200]}"
        return CRASH, f"{type(err).__name__}: {str(err)[:300]}"
    if case.check is not None:
        problem = case.check(result)
        if problem:
            return CRASH, f"accepted an invalid result: {problem}"
    return ACCEPTED, ""


# ----------------------------------------------------------------------------- shared strategies

SPECIAL_STRINGS = ["", " ", "  \t", "{}", "{}{}", "{", "}", "{} {}", "X", "{} is", "a X b", "\x00", "\u2028",
                   "\ud800", "é", "ÉCOLE", "ß", "null", "0", "-1", "[]", "{\"a\": 1}", "x" * 300]
KEYS = ["case_id", "prompt", "subject", "target_new", "ground_truth", "rephrase_prompt", "locality_prompt",
        "locality_ground_truth", "src", "alt", "answers", "rephrase", "loc", "loc_ans", "requested_rewrite",
        "paraphrase_prompts", "neighborhood_prompts", "neighborhood_answers", "str", "id"]

SCALARS = (st.none() | st.booleans() | st.integers() | st.integers(-3, 3)
           | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
           | st.sampled_from(SPECIAL_STRINGS))
JSON_VALUES = st.recursive(SCALARS, lambda kids: st.lists(kids, max_size=4)
                           | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=6), kids, max_size=5),
                           max_leaves=12)


def _dumps(obj: Any) -> str:
    """JSON text of ``obj`` (ASCII, so lone surrogates survive as escapes; NaN allowed)."""
    return json.dumps(obj, ensure_ascii=True)


# ----------------------------------------------------------------------------- driver

@dataclass(frozen=True)
class Target:
    name: str
    make: Callable[[Any, Path], Case]
    weight: float  # share of the example budget


@dataclass
class Tally:
    """Counts per target and outcome, with the first few crash details."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)
    crashes: list[dict] = field(default_factory=list)
    crash_kinds: dict[str, int] = field(default_factory=dict)  # "target: first words of the detail" -> count
    samples: dict[str, list[str]] = field(default_factory=dict)
    max_seconds: float = 0.0  # the slowest single input (build + read), and which it was
    slowest: str = ""
    first_seconds: float = 0.0  # the slowest first input of a target (includes the reader's imports)
    max_rss_growth_mb: float = 0.0  # the largest rise of the process's peak RSS during one input

    def add(self, target: str, outcome: str, detail: str, desc: str) -> None:
        row = self.counts.setdefault(target, {ACCEPTED: 0, REJECTED: 0, BUILTIN: 0, CRASH: 0})
        row[outcome] += 1
        if outcome == CRASH:
            kind = f"{target}: {detail[:70]}"
            self.crash_kinds[kind] = self.crash_kinds.get(kind, 0) + 1
            if len(self.crashes) < 50:
                self.crashes.append({"target": target, "detail": detail, "input": desc})
        if outcome == REJECTED and len(self.samples.setdefault(target, [])) < 3:
            self.samples[target].append(detail)

    def total(self, outcome: str | None = None) -> int:
        return sum(sum(r.values()) if outcome is None else r[outcome] for r in self.counts.values())


def run_case(target: Target, data, root: Path) -> tuple[str, str, str]:
    """Build and classify one case of ``target`` in a fresh folder under ``root``."""
    work = Path(tempfile.mkdtemp(dir=root))
    try:
        try:
            case = target.make(data, work)
        except KeyboardInterrupt:
            raise
        except BaseException as err:  # the generator itself must not fail; report it loudly
            if type(err).__name__ in ("StopTest", "Frozen", "UnsatisfiedAssumption"):
                raise
            return CRASH, f"case generator failed: {type(err).__name__}: {err}", target.name
        outcome, detail = classify(case)
        return outcome, detail, case.desc
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _peak_rss_mb() -> float:
    """This process's peak resident set size so far, in MB (Linux reports KiB)."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def fuzz_target(target: Target, n: int, tally: Tally, root: Path, seed: int | None = None) -> None:
    """Run ``n`` generated examples of ``target`` (no shrinking), adding to ``tally``."""
    sett = settings(max_examples=n, database=None, deadline=None, phases=[Phase.generate],
                    suppress_health_check=list(HealthCheck))

    first = [True]

    @sett
    @given(st.data())
    def prop(data):
        t0, rss0 = time.perf_counter(), _peak_rss_mb()
        outcome, detail, desc = run_case(target, data, root)
        took = time.perf_counter() - t0
        tally.max_rss_growth_mb = max(tally.max_rss_growth_mb, _peak_rss_mb() - rss0)
        if first[0]:  # the target's first input also pays for importing its reader
            first[0] = False
            tally.first_seconds = max(tally.first_seconds, took)
        elif took > tally.max_seconds:
            tally.max_seconds, tally.slowest = took, f"{target.name}: {desc}"[:200]
        tally.add(target.name, outcome, detail, desc)

    if seed is not None:
        prop = hyp_seed(seed)(prop)
    prop()


def format_tally(tally: Tally) -> str:
    head = f"{'target':<28}{'inputs':>8}{'accepted':>10}{'rejected':>10}{'builtin':>9}{'crashes':>9}"
    rows = [head]
    for name, r in tally.counts.items():
        rows.append(f"{name:<28}{sum(r.values()):>8}{r[ACCEPTED]:>10}{r[REJECTED]:>10}{r[BUILTIN]:>9}{r[CRASH]:>9}")
    rows.append(f"{'TOTAL':<28}{tally.total():>8}{tally.total(ACCEPTED):>10}{tally.total(REJECTED):>10}"
                f"{tally.total(BUILTIN):>9}{tally.total(CRASH):>9}")
    return "\n".join(rows)
