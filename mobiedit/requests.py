"""Edit requests: one typed record, loaders for the three request formats, and a ROME-form writer.

Formats (see ``mobiedit/data/knowedit/README.md``):

* ``counterfact_rome`` — ROME's CounterFact: ``requested_rewrite`` with a ``{}`` subject slot,
  ``target_new.str`` / ``target_true.str``, ``paraphrase_prompts``, ``neighborhood_prompts``
  (answered by ``target_true.str``). ``attribute_prompts``, ``generation_prompts``, ``pararel_idx``,
  ``relation_id`` and the targets' ``id`` are ignored. Extension written by :func:`save_requests`:
  an optional ``neighborhood_answers`` list, used when the answers are not all ``target_true``.
* ``counterfact_flat`` — EasyEdit's flat CounterFact: ``prompt``, ``subject``, ``target_new``,
  ``ground_truth``, ``rephrase_prompt``, ``locality_prompt``, ``locality_ground_truth``.
* ``zsre`` — zsRE as prepared for MEND, read with **EasyEdit's convention**: prompt = ``src``,
  target_new = ``alt``, target_true = ``answers[0]``, paraphrase = ``rephrase``, neighbour =
  ``loc`` answered by ``loc_ans`` (ROME's own zsRE loader edits toward ``answers[0]`` instead).

Invariants of every :class:`EditRequest`: ``prompt`` holds exactly one ``{}`` (the subject slot);
targets and answers are non-empty and carry no surrounding whitespace (tokenisation adds the
leading space, see :func:`spaced_target`); neighbour prompts and answers have equal length.
Flat prompts become templates by replacing the subject's first occurrence (verbatim, else
case-insensitively, in which case ``subject`` takes the prompt's spelling so that
``rewrite_prompt`` reproduces the original prompt exactly).
"""
from __future__ import annotations

import json
import logging
import os
import re
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path
from typing import Any, Callable, Sequence

from .atomic import atomic_write_text
from .errors import RequestError
from .jsonio import DuplicateKeyError, JSONProblem, loads_strict

log = logging.getLogger(__name__)

SLOT = "{}"
FORMATS = ("counterfact_rome", "counterfact_flat", "zsre")


def spaced_target(target: str) -> str:
    """Text to tokenise for a target: ``" " + target``.

    Targets are stored without a leading space; like ROME, the space that separates the target
    from the prompt is added at tokenisation so that BPE tokenisers produce the in-context tokens.
    """
    return target if target.startswith(" ") else " " + target


@dataclass(frozen=True)
class EditRequest:
    """One knowledge edit: make the model complete ``rewrite_prompt`` with ``target_new``.

    Construction validates the module invariants (see module docstring) and raises
    :class:`RequestError` naming the field; list arguments are converted to tuples.
    """

    case_id: str
    prompt: str
    subject: str
    target_new: str
    target_true: str | None
    paraphrase_prompts: tuple[str, ...] = ()
    neighborhood_prompts: tuple[str, ...] = ()
    neighborhood_answers: tuple[str, ...] = ()
    source: str = "cli"

    def __post_init__(self) -> None:
        for name in ("paraphrase_prompts", "neighborhood_prompts", "neighborhood_answers"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))
        problem = _problem(self)
        if problem is not None:
            field, msg, fix = problem
            raise RequestError(msg, where=f"request {self.case_id!r}, field '{field}'", fix=fix)

    @property
    def rewrite_prompt(self) -> str:
        """The full prompt: the template with its single ``{}`` slot replaced by the subject."""
        return self.prompt.replace(SLOT, self.subject, 1)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict of all fields (tuples as lists); inverse of :meth:`from_dict`."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "EditRequest":
        """Rebuild from :meth:`to_dict` output; a missing or unknown key raises RequestError."""
        names = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or set(data) != names:
            got = sorted(data, key=repr) if isinstance(data, dict) else type(data).__name__
            raise RequestError(f"request dict has keys {got}", where="request dict",
                               fix=f"give exactly the keys {sorted(names)}")
        return cls(**data)


def _is_clean(text: Any) -> bool:
    """True for a non-empty string without surrounding whitespace."""
    return isinstance(text, str) and bool(text) and text == text.strip()


def _problem(req: EditRequest) -> tuple[str, str, str] | None:
    """The first violated invariant of ``req`` as (field, message, fix), or None."""
    answer_fix = "give the answer text without surrounding spaces (tokenisation adds the space)"
    checks: list[tuple[str, bool, str]] = [
        ("case_id", _is_clean(req.case_id), "give each request a non-empty id"),
        ("prompt", isinstance(req.prompt, str) and req.prompt.count(SLOT) == 1,
         "write the prompt as a template with exactly one {} for the subject, e.g. '{} plays the'"),
        ("subject", isinstance(req.subject, str) and bool(req.subject.strip()), "give the subject"),
        ("target_new", _is_clean(req.target_new), answer_fix),
        ("target_true", req.target_true is None or _is_clean(req.target_true), answer_fix),
        ("source", _is_clean(req.source), "name the format, e.g. " + ", ".join(FORMATS)),
    ]
    for name in ("paraphrase_prompts", "neighborhood_prompts"):
        value = getattr(req, name)
        checks.append((name, isinstance(value, tuple) and all(
            isinstance(x, str) and x.strip() for x in value), "give a list of non-empty prompts"))
    answers = req.neighborhood_answers
    checks.append(("neighborhood_answers", isinstance(answers, tuple) and all(map(_is_clean, answers))
                   and isinstance(req.neighborhood_prompts, tuple)
                   and len(answers) == len(req.neighborhood_prompts),
                   "give one clean answer per neighborhood prompt"))
    for name, ok, fix in checks:
        if not ok:
            return name, f"invalid value {getattr(req, name)!r}"[:300], fix
    return None


def _slot(prompt: str, subject: str) -> tuple[str, str] | None:
    """(template, subject as spelt in prompt): the subject's first occurrence becomes ``{}``.

    Verbatim substring first (ROME's rule); else a case-insensitive match that is not inside a
    word. None when neither occurs.
    """
    if not subject:
        return None
    at = prompt.find(subject)
    end = at + len(subject)
    if at < 0:
        m = re.search(r"(?<!\w)" + re.escape(subject) + r"(?!\w)", prompt, re.IGNORECASE)
        if m is None:
            return None
        at, end = m.span()
    return prompt[:at] + SLOT + prompt[end:], prompt[at:end]


# ----------------------------------------------------------------------------- record access

class _Rec:
    """Typed field access to one raw record; every failure names the record and the field."""

    def __init__(self, index: int, raw: Any) -> None:
        self.index = index
        self.case_id: str | None = None
        if not isinstance(raw, dict):
            self.fail(None, f"must be a JSON object, got {type(raw).__name__}",
                      "each record is an object such as {\"prompt\": ..., \"subject\": ...}")
        self.raw = raw

    def where(self, field: str | None) -> str:
        cid = f" (case_id {self.case_id})" if self.case_id is not None else ""
        return f"record {self.index}{cid}" + (f", field '{field}'" if field else "")

    def fail(self, field: str | None, msg: str, fix: str) -> None:
        raise RequestError(msg, where=self.where(field), fix=fix)

    def get(self, obj: dict, key: str, dotted: str, kind: type | tuple, required: bool = True) -> Any:
        """``obj[key]`` checked to be ``kind``; missing → error if ``required`` else None."""
        if key not in obj or (obj[key] is None and not required):
            if required:
                self.fail(dotted, "missing field", f"add '{dotted}'")
            return None
        value = obj[key]
        if not isinstance(value, kind) or isinstance(value, bool):
            want = kind.__name__ if isinstance(kind, type) else " or ".join(k.__name__ for k in kind)
            self.fail(dotted, f"must be {want}, got {type(value).__name__}", f"make '{dotted}' a {want}")
        return value

    def text(self, obj: dict, key: str, dotted: str, required: bool = True) -> str | None:
        return self.get(obj, key, dotted, str, required)

    def target(self, value: str | None, dotted: str) -> str | None:
        """A target/answer stripped of surrounding whitespace; empty → error."""
        if value is None:
            return None
        if not value.strip():
            self.fail(dotted, f"is empty ({value!r})", "give the answer text")
        return value.strip()

    def texts(self, obj: dict, key: str, dotted: str, allow_str: bool = False) -> list[str]:
        """A list of non-empty strings (a lone string too if ``allow_str``); missing → []."""
        value = self.get(obj, key, dotted, (list, str) if allow_str else list, required=False)
        if value is None:
            return []
        items = [value] if isinstance(value, str) else value
        for i, item in enumerate(items):
            if not isinstance(item, str) or not item.strip():
                self.fail(f"{dotted}[{i}]", f"must be a non-empty string, got {item!r}",
                          "remove it or give the prompt text")
        return list(items)

    def take_case_id(self) -> str:
        value = self.get(self.raw, "case_id", "case_id", (int, str), required=False)
        self.case_id = None if value is None else str(value)
        if self.case_id is not None and not self.case_id.strip():
            self.fail("case_id", "is empty", "give a non-empty id or drop the field")
        return self.case_id or str(self.index)


def _template(rec: _Rec, prompt: str, subject: str, dotted: str) -> tuple[str, str]:
    """Turn a flat prompt into a one-slot template; returns (template, subject as spelt in prompt)."""
    if not subject.strip():
        rec.fail("subject", "is empty", "give the subject the edit is about")
    if SLOT in prompt:
        rec.fail(dotted, "already contains '{}'", "remove the braces or use the counterfact_rome form")
    found = _slot(prompt, subject)
    if found is None:
        rec.fail(dotted, f"does not contain the subject {subject!r}: {prompt!r}",
                 "write the subject verbatim in the prompt or correct 'subject'")
    return found


def _answers(rec: _Rec, prompts: list[str], key: str) -> list[str]:
    """The answers under ``key`` (one per neighbour prompt), stripped."""
    answers = rec.texts(rec.raw, key, key, allow_str=True)
    if len(prompts) != len(answers):
        rec.fail(key, f"has {len(answers)} answers for {len(prompts)} prompts",
                 "give one answer per neighbour prompt")
    return [rec.target(a, f"{key}[{i}]") for i, a in enumerate(answers)]


def _build(rec: _Rec, **kw: Any) -> EditRequest:
    """Construct the request, re-raising an invariant violation with the record's location."""
    try:
        return EditRequest(case_id=rec.case_id or str(rec.index), **kw)
    except RequestError as err:
        raise RequestError(err.message, where=f"record {rec.index}: {err.where}", fix=err.fix) from None


def _rome_target(rec: _Rec, rr: dict, key: str, required: bool) -> str | None:
    """``requested_rewrite[key]["str"]`` (a plain string is accepted too), stripped."""
    dotted = f"requested_rewrite.{key}"
    value = rec.get(rr, key, dotted, (dict, str), required)
    if isinstance(value, dict):
        dotted += ".str"
        value = rec.text(value, "str", dotted)
    return rec.target(value, dotted)


def _from_rome(rec: _Rec) -> EditRequest:
    rec.take_case_id()
    rr = rec.get(rec.raw, "requested_rewrite", "requested_rewrite", dict)
    prompt = rec.text(rr, "prompt", "requested_rewrite.prompt")
    subject = rec.text(rr, "subject", "requested_rewrite.subject")
    if prompt.count(SLOT) != 1:
        rec.fail("requested_rewrite.prompt", f"must contain exactly one '{{}}', got {prompt!r}",
                 "write the subject slot as {} once, e.g. '{} plays the'")
    if not subject.strip():
        rec.fail("requested_rewrite.subject", "is empty", "give the subject the edit is about")
    new = _rome_target(rec, rr, "target_new", True)
    true = _rome_target(rec, rr, "target_true", False)
    para = rec.texts(rec.raw, "paraphrase_prompts", "paraphrase_prompts")
    neigh = rec.texts(rec.raw, "neighborhood_prompts", "neighborhood_prompts")
    if "neighborhood_answers" in rec.raw:
        answers = _answers(rec, neigh, "neighborhood_answers")
    elif neigh and true is None:
        rec.fail("requested_rewrite.target_true", "missing, but neighbour prompts need it as answer",
                 "add target_true or remove neighborhood_prompts")
    else:
        answers = [true] * len(neigh)
    return _build(rec, prompt=prompt, subject=subject, target_new=new, target_true=true,
                  paraphrase_prompts=para, neighborhood_prompts=neigh, neighborhood_answers=answers,
                  source="counterfact_rome")


def _zsre_true(rec: _Rec) -> str:
    """EasyEdit's zsRE ground truth: ``answers[0]``."""
    answers = rec.get(rec.raw, "answers", "answers", list)
    if not answers or not isinstance(answers[0], str):
        rec.fail("answers", f"must be a non-empty list of strings, got {answers!r}"[:300],
                 "give the true answer as answers[0]")
    return rec.target(answers[0], "answers[0]")


def _flat_like(rec: _Rec, keys: tuple[str, str, str, str, str], source: str) -> EditRequest:
    """Shared reader of the flat formats; ``keys`` = (prompt, target_new, paraphrase, neighbour
    prompt, neighbour answer) field names; target_true is ``ground_truth`` or zsRE's answers[0]."""
    k_prompt, k_new, k_para, k_loc, k_ans = keys
    rec.take_case_id()
    prompt = rec.text(rec.raw, k_prompt, k_prompt)
    template, subject = _template(rec, prompt, rec.text(rec.raw, "subject", "subject"), k_prompt)
    new = rec.target(rec.text(rec.raw, k_new, k_new), k_new)
    if source == "zsre":
        true = _zsre_true(rec)
    else:
        true = rec.target(rec.text(rec.raw, "ground_truth", "ground_truth", required=False), "ground_truth")
    neigh = rec.texts(rec.raw, k_loc, k_loc, allow_str=True)
    return _build(rec, prompt=template, subject=subject, target_new=new, target_true=true,
                  paraphrase_prompts=rec.texts(rec.raw, k_para, k_para, allow_str=True),
                  neighborhood_prompts=neigh, neighborhood_answers=_answers(rec, neigh, k_ans),
                  source=source)


def _from_flat(rec: _Rec) -> EditRequest:
    keys = ("prompt", "target_new", "rephrase_prompt", "locality_prompt", "locality_ground_truth")
    return _flat_like(rec, keys, "counterfact_flat")


def _from_zsre(rec: _Rec) -> EditRequest:
    return _flat_like(rec, ("src", "alt", "rephrase", "loc", "loc_ans"), "zsre")


_PARSERS: dict[str, Callable[[_Rec], EditRequest]] = {
    "counterfact_rome": _from_rome, "counterfact_flat": _from_flat, "zsre": _from_zsre}


def detect_format(record: Any) -> str | None:
    """Format of one raw record by its keys, or None when no format matches."""
    if not isinstance(record, dict):
        return None
    if "requested_rewrite" in record:
        return "counterfact_rome"
    if "src" in record and "alt" in record:
        return "zsre"
    if "prompt" in record and ("target_new" in record or "ground_truth" in record):
        return "counterfact_flat"
    return None


# ----------------------------------------------------------------------------- files

def _read_records(path: Path) -> list[Any]:
    """Parse a JSON list or JSON Lines file; every failure is a RequestError naming the file."""
    where = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RequestError("file not found", where=where, fix="check the path") from None
    except (OSError, UnicodeDecodeError) as e:
        raise RequestError(f"cannot read file ({type(e).__name__}: {e})", where=where,
                           fix="pass a readable UTF-8 JSON or JSON Lines file") from None
    if not text.strip():
        raise RequestError("file is empty", where=where, fix="write a JSON list of request records")
    try:
        data = loads_strict(text)
    except DuplicateKeyError as e:
        raise RequestError(str(e), where=where, fix="remove the repeated key (JSON would keep only the last)") from None
    except JSONProblem as first:  # malformed, too many digits, too deep
        if not text.lstrip().startswith("{"):
            raise RequestError(f"not valid JSON ({first})", where=where,
                               fix="write a JSON list or JSON Lines (one object per line)") from None
        data = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                data.append(loads_strict(line))
            except DuplicateKeyError as e:
                raise RequestError(f"line {n}: {e}", where=where,
                                   fix="remove the repeated key (JSON would keep only the last)") from None
            except JSONProblem as e:
                raise RequestError(f"neither JSON nor JSON Lines: line {n} is not valid JSON ({e})",
                                   where=where, fix="fix or remove that line") from None
        return data
    if isinstance(data, dict) and path.suffix == ".jsonl":
        return [data]
    if not isinstance(data, list):
        raise RequestError(f"top level is a JSON {type(data).__name__}, not a list", where=where,
                           fix="wrap the records in [ ... ] or write one object per line (.jsonl)")
    return data


def load_requests(path_or_records: str | os.PathLike | Sequence[Any], fmt: str = "auto", *,
                  skip_invalid: bool = False) -> list[EditRequest]:
    """Load and validate edit requests from a file (JSON list or JSON Lines) or parsed records.

    ``fmt="auto"`` detects the format from the first record; all records are then read in that
    format. Any invalid record raises :class:`RequestError` naming the record index, case_id and
    field — unless ``skip_invalid`` is set, which drops such records and logs how many (file-level
    problems always raise). Duplicate case_ids count as invalid. Nothing is ever written.
    """
    if fmt != "auto" and fmt not in FORMATS:
        raise RequestError(f"unknown format {fmt!r}", where="argument fmt",
                           fix="use 'auto' or one of " + ", ".join(FORMATS))
    source = "records argument"
    if isinstance(path_or_records, (str, os.PathLike)):
        source = str(path_or_records)
        records = _read_records(Path(path_or_records))
    elif isinstance(path_or_records, Sequence):
        records = list(path_or_records)
    else:
        raise RequestError(f"expected a path or a list of records, got {type(path_or_records).__name__}",
                           where="argument path_or_records", fix="pass a file path or a list of dicts")
    if not records:
        raise RequestError("no records", where=source, fix="add at least one request")
    if fmt == "auto":
        fmt = detect_format(records[0]) or ""
        if not fmt:
            first = records[0]
            what = f"keys {sorted(first, key=repr)}" if isinstance(first, dict) else f"a {type(first).__name__}"
            raise RequestError(f"format not recognised (record is {what})", where=f"{source}, record 0",
                               fix="use keys of one format: 'requested_rewrite' (counterfact_rome), "
                                   "'prompt'+'target_new' (counterfact_flat), 'src'+'alt' (zsre)")
        log.info("request format detected: %s", fmt)
    out: list[EditRequest] = []
    seen: dict[str, int] = {}
    errors: list[RequestError] = []
    for i, raw in enumerate(records):
        try:
            rec = _Rec(i, raw)
            req = _PARSERS[fmt](rec)
            if req.case_id in seen:
                rec.fail("case_id", f"duplicates record {seen[req.case_id]}", "give each record a unique id")
        except RequestError as err:
            if not skip_invalid:
                raise
            errors.append(err)
            continue
        seen[req.case_id] = i
        out.append(req)
    if errors:
        log.warning("skipped %d invalid of %d %s records; first: %s", len(errors), len(records), fmt,
                    errors[0])
    same = sum(r.target_new == r.target_true for r in out)
    if same:
        log.warning("%d requests have target_new equal to target_true (no-op edits)", same)
    if not out:
        raise RequestError("every record is invalid", where=source,
                           fix=f"first problem: {errors[0]}")
    return out


def requests_from_cli(subject: str, prompt: str, target_new: str,
                      target_true: str | None = None) -> list[EditRequest]:
    """One ad-hoc request from command-line strings, as a one-element list.

    ``prompt`` is either a template with one ``{}`` or a plain prompt containing the subject.
    Errors name the command-line option.
    """
    values = {"--subject": subject, "--prompt": prompt, "--target-new": target_new}
    for opt, val in values.items():
        if not isinstance(val, str) or not val.strip():
            raise RequestError(f"must be non-empty text, got {val!r}", where=f"command line, {opt}",
                               fix=f"pass {opt} \"...\"")
    if target_true is not None and not (isinstance(target_true, str) and target_true.strip()):
        raise RequestError(f"must be non-empty text, got {target_true!r}",
                           where="command line, --target-true", fix="pass text or omit the option")
    if prompt.count(SLOT) == 1:
        template = prompt
    elif SLOT in prompt or _slot(prompt, subject) is None:
        raise RequestError(f"must contain the subject {subject!r} or exactly one '{{}}' slot",
                           where="command line, --prompt", fix="write the subject (or one {}) in the prompt")
    else:
        template, subject = _slot(prompt, subject)
    return [EditRequest(case_id="cli", prompt=template, subject=subject, target_new=target_new.strip(),
                        target_true=target_true.strip() if target_true else None, source="cli")]


def to_rome_record(req: EditRequest) -> dict[str, Any]:
    """The ROME CounterFact form of ``req`` (``neighborhood_answers`` only when not all target_true)."""
    cid: int | str = int(req.case_id) if re.fullmatch(r"0|[1-9][0-9]*", req.case_id) else req.case_id
    rr: dict[str, Any] = {"prompt": req.prompt, "subject": req.subject, "target_new": {"str": req.target_new}}
    if req.target_true is not None:
        rr["target_true"] = {"str": req.target_true}
    rec: dict[str, Any] = {"case_id": cid, "requested_rewrite": rr,
                           "paraphrase_prompts": list(req.paraphrase_prompts),
                           "neighborhood_prompts": list(req.neighborhood_prompts)}
    if any(a != req.target_true for a in req.neighborhood_answers):
        rec["neighborhood_answers"] = list(req.neighborhood_answers)
    return rec


def save_requests(path: str | os.PathLike, reqs: Sequence[EditRequest]) -> None:
    """Write ``reqs`` atomically in ROME form (JSON list; JSON Lines if ``path`` ends in .jsonl).

    Reloading gives equal requests except ``source``, which becomes ``counterfact_rome``.
    Nothing is written if any item is not an :class:`EditRequest`.
    """
    for i, req in enumerate(reqs):
        if not isinstance(req, EditRequest):
            raise RequestError(f"is a {type(req).__name__}, not an EditRequest", where=f"request {i}",
                               fix="pass requests built by load_requests / requests_from_cli")
    records = [to_rome_record(r) for r in reqs]
    if Path(path).suffix == ".jsonl":
        text = "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
    else:
        text = json.dumps(records, ensure_ascii=False, indent=2) + "\n"
    atomic_write_text(path, text)


def bundled_names() -> list[str]:
    """Names of the request files shipped in ``mobiedit/data/knowedit``."""
    folder = resources.files("mobiedit") / "data" / "knowedit"
    return sorted(p.name for p in folder.iterdir() if p.name.endswith((".json", ".jsonl")))


def bundled_path(name: str) -> Path:
    """Filesystem path of a bundled request file, e.g. ``bundled_path("counterfact-edit-1k.json")``."""
    names = bundled_names()
    if name not in names:
        raise RequestError(f"no bundled request file {name!r}", where="mobiedit/data/knowedit",
                           fix="use one of " + ", ".join(names))
    res = resources.files("mobiedit") / "data" / "knowedit" / name
    path = Path(str(res))
    if not path.is_file():
        raise RequestError("bundled file is not on the filesystem (zipped install?)", where=str(res),
                           fix="install mobiedit as a regular (unzipped) package")
    return path
