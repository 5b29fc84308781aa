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
leading space, see :func:`~mobiedit.request_record.spaced_target`); neighbour prompts and
answers have equal length.
Flat prompts become templates by replacing the subject's first occurrence (verbatim, else
case-insensitively, in which case ``subject`` takes the prompt's spelling so that
``rewrite_prompt`` reproduces the original prompt exactly).

The record and the readers of one raw record per format (parsing and validation, no I/O) are
:mod:`mobiedit.request_record`; this module reads and writes the files.
"""
from __future__ import annotations

import json
import logging
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any, Sequence

from .atomic import atomic_write_text
from .errors import RequestError
from .jsonio import DuplicateKeyError, JSONProblem, loads_strict
from .request_record import (FORMATS, SLOT, EditRequest, PARSERS, Rec, subject_slot,  # EditRequest: re-exported
                             detect_format)

log = logging.getLogger(__name__)


# ----------------------------------------------------------------------------- files

def _read_records(path: Path) -> list[Any]:
    """Parse a JSON list or JSON Lines file; every failure is a RequestError naming the file (a lone
    surrogate escape is left to the record's validation, which names its field)."""
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
        data = loads_strict(text, lone_surrogates=True)
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
                data.append(loads_strict(line, lone_surrogates=True))
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
            rec = Rec(i, raw)
            req = PARSERS[fmt](rec)
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
    values = {"--subject": subject, "--prompt": prompt, "--target": target_new}
    for opt, val in values.items():
        if not isinstance(val, str) or not val.strip():
            raise RequestError("is missing" if val is None else f"must be non-empty text, got {val!r}",
                               where=f"command line, {opt}", fix=f"pass {opt} \"...\"")
    if target_true is not None and not (isinstance(target_true, str) and target_true.strip()):
        raise RequestError(f"must be non-empty text, got {target_true!r}",
                           where="command line, --target-true", fix="pass text or omit the option")
    if prompt.count(SLOT) == 1:
        template = prompt
    elif SLOT in prompt or subject_slot(prompt, subject) is None:
        raise RequestError(f"must contain the subject {subject!r} or exactly one '{{}}' slot",
                           where="command line, --prompt", fix="write the subject (or one {}) in the prompt")
    else:
        template, subject = subject_slot(prompt, subject)
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
