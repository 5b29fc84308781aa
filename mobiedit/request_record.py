"""One edit request: the typed record :class:`EditRequest`, its invariants, and the readers of one
raw record in each request format — parsing and validation of one request, no I/O.

Invariants of every :class:`EditRequest`: ``prompt`` holds exactly one ``{}`` (the subject slot);
targets and answers are non-empty and carry no surrounding whitespace (tokenisation adds the
leading space, see :func:`spaced_target`); neighbour prompts and answers have equal length.

The formats, and how flat prompts become templates, are described in :mod:`mobiedit.requests`,
which reads and writes the files, re-exports :class:`EditRequest` and is the module to import.
"""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from typing import Any, Callable

from .errors import RequestError
from .jsonio import LONE_SURROGATE, LONE_SURROGATE_FIX, has_lone_surrogate

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


def subject_slot(prompt: str, subject: str) -> tuple[str, str] | None:
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

class Rec:
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
        if isinstance(value, str):
            self.unicode(value, dotted)
        return value

    def unicode(self, value: str, dotted: str) -> None:
        """Refuse a string holding a lone surrogate (a ``\\ud800`` escape without its pair): no
        output file could store it."""
        if has_lone_surrogate(value):
            self.fail(dotted, LONE_SURROGATE, LONE_SURROGATE_FIX)

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
            self.unicode(item, f"{dotted}[{i}]")
        return list(items)

    def take_case_id(self) -> str:
        value = self.get(self.raw, "case_id", "case_id", (int, str), required=False)
        self.case_id = None if value is None else str(value)
        if self.case_id is not None and not self.case_id.strip():
            self.fail("case_id", "is empty", "give a non-empty id or drop the field")
        return self.case_id or str(self.index)


def _template(rec: Rec, prompt: str, subject: str, dotted: str) -> tuple[str, str]:
    """Turn a flat prompt into a one-slot template; returns (template, subject as spelt in prompt)."""
    if not subject.strip():
        rec.fail("subject", "is empty", "give the subject the edit is about")
    if SLOT in prompt:
        rec.fail(dotted, "already contains '{}'", "remove the braces or use the counterfact_rome form")
    found = subject_slot(prompt, subject)
    if found is None:
        rec.fail(dotted, f"does not contain the subject {subject!r}: {prompt!r}",
                 "write the subject verbatim in the prompt or correct 'subject'")
    return found


def _answers(rec: Rec, prompts: list[str], key: str) -> list[str]:
    """The answers under ``key`` (one per neighbour prompt), stripped."""
    answers = rec.texts(rec.raw, key, key, allow_str=True)
    if len(prompts) != len(answers):
        rec.fail(key, f"has {len(answers)} answers for {len(prompts)} prompts",
                 "give one answer per neighbour prompt")
    return [rec.target(a, f"{key}[{i}]") for i, a in enumerate(answers)]


def _build(rec: Rec, **kw: Any) -> EditRequest:
    """Construct the request, re-raising an invariant violation with the record's location."""
    try:
        return EditRequest(case_id=rec.case_id or str(rec.index), **kw)
    except RequestError as err:
        raise RequestError(err.message, where=f"record {rec.index}: {err.where}", fix=err.fix) from None


def _rome_target(rec: Rec, rr: dict, key: str, required: bool) -> str | None:
    """``requested_rewrite[key]["str"]`` (a plain string is accepted too), stripped."""
    dotted = f"requested_rewrite.{key}"
    value = rec.get(rr, key, dotted, (dict, str), required)
    if isinstance(value, dict):
        dotted += ".str"
        value = rec.text(value, "str", dotted)
    return rec.target(value, dotted)


def _from_rome(rec: Rec) -> EditRequest:
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


def _zsre_true(rec: Rec) -> str:
    """EasyEdit's zsRE ground truth: ``answers[0]``."""
    answers = rec.get(rec.raw, "answers", "answers", list)
    if not answers or not isinstance(answers[0], str):
        rec.fail("answers", f"must be a non-empty list of strings, got {answers!r}"[:300],
                 "give the true answer as answers[0]")
    return rec.target(answers[0], "answers[0]")


def _flat_like(rec: Rec, keys: tuple[str, str, str, str, str], source: str) -> EditRequest:
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


def _from_flat(rec: Rec) -> EditRequest:
    keys = ("prompt", "target_new", "rephrase_prompt", "locality_prompt", "locality_ground_truth")
    return _flat_like(rec, keys, "counterfact_flat")


def _from_zsre(rec: Rec) -> EditRequest:
    return _flat_like(rec, ("src", "alt", "rephrase", "loc", "loc_ans"), "zsre")


PARSERS: dict[str, Callable[[Rec], EditRequest]] = {
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
