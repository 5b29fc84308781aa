"""The model profile: one sidecar, ``mobiedit.json``, beside every model folder the project edits.

It records what editing needs to know about a model and why: the edit layer (and the causal trace
or sweep that chose it), the context-template settings, where the key statistics ``C = E[k kᵀ]``
come from, and whether the model answers through its chat template. ``mobiedit trace
--write-profile`` and ``mobiedit tune`` write it; ``edit``, ``bench``, ``export`` and the demo read it,
so no ``--layer`` is needed afterwards. Every producer (the fact-LM trainer, ``quantize``, ``edit``'s
output folder) writes or copies it through :func:`write_profile` / :func:`copy_sidecars`.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path

from .atomic import atomic_write_text
from .errors import ConfigError
from .jsonio import JSONProblem, loads_strict

log = logging.getLogger(__name__)

PROFILE_FILE = "mobiedit.json"
#: statistics sources: the model's own pretraining text file (``file:NAME`` in the folder), the
#: natural-text corpus of :mod:`mobiedit.corpora` (``wikipedia``), or the bundled CounterFact
#: prompts (``counterfact``, a small fallback).
STATS_SOURCES = ("wikipedia", "counterfact")
#: the request file of a model without a ``requests`` entry: the bundled CounterFact 1k
#: (``mobiedit/data/knowedit``), the facts the project's fact LM was trained on
DEFAULT_REQUESTS = "counterfact-edit-1k.json"


@dataclass(frozen=True)
class ModelProfile:
    """What editing a given model needs.

    Attributes:
        edit_layer: the layer whose MLP output matrix is edited.
        layer_reason: why that layer (trace summary, sweep, or "set by hand").
        stats_corpus: ``wikipedia`` | ``counterfact`` | ``file:NAME`` (a text file in the folder).
        chat_template: answer prompts through the tokenizer's chat template (an instruct model).
        context: overrides of :class:`~mobiedit.editing.config.ContextConfig` (e.g. ``{"lengths": ...}``).
        objective: overrides of :class:`~mobiedit.editing.config.ObjectiveConfig` chosen for this model.
        success: the success rule chosen for this model — ``nll`` (the loss margin of
            :class:`~mobiedit.recipes.SuccessCriterion`: the forward-only search stops when the
            target NLL is within it) and/or ``fraction`` (share of rewrite rows that must hold);
            what is absent keeps the recipe's. ROME's value search has no NLL margin (it stops on
            its own ``early_loss``), so ``nll`` reaches MobiEdit configs and bundles only.
        settle: the forward-only search's settle phase after its first success
            (:class:`~mobiedit.recipes.Settle`: ``rounds``, ``shrink``, ``steps``); MobiEdit
            configs and bundles only; absent: none.
        methods: one method's own settings over the shared ``objective`` / ``context``, keyed by
            method (:data:`PROFILE_METHODS`), e.g. ``{"rome": {"objective": {"weight_decay": 2}}}``
            when each search was tuned to its own value (``mobiedit tune --scope method``): a fair
            comparison runs every method at the settings tuned for it. The forward-only search may
            also set what only it has (:data:`METHOD_SECTIONS`): its estimator (``zo``,
            :class:`~mobiedit.zo.ZOConfig` fields, e.g. ``{"lr": 2, "h": 0.2}``; a bundle's recipe
            takes them too) and the forward its loop runs on (``quant``,
            :class:`~mobiedit.forward.quant.QuantConfig` fields, e.g. ``{"scheme": "bf16"}``; eager
            only — a bundle's programs are quantized by the export).
        requests: the request file of facts this model knows — the default of ``bench``,
            ``sequential``, ``tune`` and ``trace`` when no ``--requests`` is given (an edit of a
            fact the model never knew has no true answer to displace, and its neighbours and
            probe facts measure nothing). ``bundled:PATH`` (a file under ``mobiedit/data``, e.g.
            ``bundled:known/smollm2-135m.json``, made by ``mobiedit requests known``),
            ``file:NAME`` (a file in the model folder), or empty: :data:`DEFAULT_REQUESTS`.
        notes: free-form provenance (which trace, which requests, when).
    """

    edit_layer: int
    layer_reason: str = "set by hand"
    stats_corpus: str = "wikipedia"
    chat_template: bool = False
    context: dict = field(default_factory=dict)
    objective: dict = field(default_factory=dict)
    success: dict = field(default_factory=dict)
    settle: dict = field(default_factory=dict)
    methods: dict = field(default_factory=dict)
    requests: str = ""
    notes: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.edit_layer, int) or isinstance(self.edit_layer, bool) or self.edit_layer < 0:
            raise ConfigError(f"edit_layer is {self.edit_layer!r}", where=f"{PROFILE_FILE}, field 'edit_layer'",
                              fix="a layer index >= 0 (`mobiedit trace --write-profile` picks one)")
        src = self.stats_corpus
        if not (src in STATS_SOURCES or (isinstance(src, str) and _relative_name(src, "file:"))):
            raise ConfigError(f"stats_corpus is {src!r}", where=f"{PROFILE_FILE}, field 'stats_corpus'",
                              fix=f"one of {STATS_SOURCES} or 'file:NAME' (a text file inside the model folder)")
        if not (isinstance(self.requests, str) and (self.requests == "" or _relative_name(self.requests, "file:")
                                                     or _relative_name(self.requests, "bundled:", nested=True))):
            raise ConfigError(f"requests is {self.requests!r}", where=f"{PROFILE_FILE}, field 'requests'",
                              fix="'bundled:known/NAME.json' (a file under mobiedit/data), 'file:NAME' (a request "
                                  "file inside the model folder) or '' (the bundled CounterFact 1k)")
        for name in (*TUNABLE_SECTIONS, "methods", "notes"):
            if not isinstance(getattr(self, name), dict):
                raise ConfigError(f"{name} must be an object", where=f"{PROFILE_FILE}, field '{name}'",
                                  fix="write a JSON object, e.g. {}")
        check_success(self.success, f"{PROFILE_FILE}, field 'success'")
        check_settle(self.settle, f"{PROFILE_FILE}, field 'settle'")
        check_methods(self.methods, f"{PROFILE_FILE}, field 'methods'")


def _relative_name(value: str, prefix: str, nested: bool = False) -> bool:
    """``value`` is ``prefix`` + a non-empty relative name with no ``..`` (and no ``/`` unless ``nested``)."""
    name = value[len(prefix):] if value.startswith(prefix) else ""
    parts = name.split("/")
    return bool(name) and not name.startswith("/") and ".." not in parts and "" not in parts \
        and (nested or len(parts) == 1)


#: the profile's ``success`` keys -> the method-config fields they set (MobiEditConfig has both,
#: ROMEConfig only ``success_fraction``) and the manifest recipe's ``success`` keys (the same names)
SUCCESS_FIELDS = {"nll": "success_nll", "fraction": "success_fraction"}


def check_success(success: dict, where: str) -> None:
    """Refuse a ``success`` section with unknown keys or values out of range (``where``: its name)."""
    from .config_io import check_fraction, check_nll

    unknown = sorted(set(success) - set(SUCCESS_FIELDS), key=str)
    if unknown:
        raise ConfigError(f"unknown key(s) {unknown}", where=where, fix=f"use only {sorted(SUCCESS_FIELDS)}")
    if "nll" in success:
        check_nll(success["nll"], f"{where}.nll")
    if "fraction" in success:
        check_fraction(success["fraction"], f"{where}.fraction")


def check_settle(settle: dict, where: str) -> None:
    """Refuse a ``settle`` section that is not a :class:`~mobiedit.recipes.Settle`'s fields in range
    (``where``: its name)."""
    from .config_io import merge
    from .settle import Settle

    merge(Settle(), settle, where)


#: the methods a profile may hold settings of its own for (``methods``): the names of
#: :data:`mobiedit.methods.METHODS` (a test keeps the two equal; this layer does not import methods)
PROFILE_METHODS = ("rome", "mobiedit")
#: the sections only one method's config has, which only ``methods.<method>`` may set: the
#: forward-only search's estimator (``zo``) and its loop's forward (``quant``)
METHOD_SECTIONS = {"rome": (), "mobiedit": ("zo", "quant")}


def check_methods(methods: dict, where: str) -> None:
    """Refuse a ``methods`` section whose keys are not :data:`PROFILE_METHODS` or whose entries are
    not objects of :data:`PROFILE_SECTIONS` (and the method's :data:`METHOD_SECTIONS`) objects
    (``where``: its name). The settings themselves are checked where they are merged, as the shared
    sections' are."""
    for method, sections in methods.items():
        if method not in PROFILE_METHODS:
            raise ConfigError(f"unknown method {method!r}", where=where, fix=f"use only {list(PROFILE_METHODS)}")
        if not isinstance(sections, dict):
            raise ConfigError("must be an object", where=f"{where}.{method}",
                              fix='write e.g. {"objective": {"weight_decay": 2}}')
        allowed = PROFILE_SECTIONS + METHOD_SECTIONS[method]
        for name, value in sections.items():
            if name not in allowed:
                raise ConfigError(f"unknown section {name!r}", where=f"{where}.{method}",
                                  fix=f"use only {list(allowed)} (success and settle are the forward-only "
                                      "search's already; zo and quant belong to methods.mobiedit)")
            if not isinstance(value, dict):
                raise ConfigError("must be an object", where=f"{where}.{method}.{name}", fix="write a JSON object")


def read_profile(model_dir: str | os.PathLike) -> ModelProfile | None:
    """The profile of ``model_dir``, or None when it has none. Malformed files are named errors."""
    path = Path(model_dir) / PROFILE_FILE
    if not path.is_file():
        return None
    try:
        raw = loads_strict(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:  # JSONProblem is a ValueError
        raise ConfigError(f"not readable JSON ({e if isinstance(e, JSONProblem) else type(e).__name__})", where=str(path),
                          fix="delete it and rerun `mobiedit trace --write-profile`") from None
    if not isinstance(raw, dict):
        raise ConfigError("must hold a JSON object", where=str(path), fix="rerun `mobiedit trace --write-profile`")
    known = {f.name for f in fields(ModelProfile)}
    unknown = sorted(set(raw) - known)
    if unknown:
        raise ConfigError(f"unknown field(s) {unknown}", where=str(path), fix=f"use only {sorted(known)}")
    if "edit_layer" not in raw:
        raise ConfigError("no edit_layer", where=str(path), fix="rerun `mobiedit trace --write-profile`")
    return ModelProfile(**raw)


def write_profile(model_dir: str | os.PathLike, profile: ModelProfile) -> Path:
    """Write ``profile`` into ``model_dir`` atomically; returns the file's path."""
    path = Path(model_dir) / PROFILE_FILE
    atomic_write_text(path, json.dumps(asdict(profile), indent=1, sort_keys=True) + "\n")
    return path


#: the fact LM's training report, written by :mod:`mobiedit.factlm.train` (also the edit layer of
#: folders written before profiles existed)
FACTLM_META = "factlm.json"


def copy_sidecars(src_dir: str | os.PathLike, dst_dir: str | os.PathLike) -> list[str]:
    """Carry what describes a model to a folder derived from it (``edit --out``, ``quantize``, the
    demo's edited copy): the profile, the ``file:`` statistics corpus and request file it names and the fact LM's
    training report. The one list of a model's sidecars; returns the names copied."""
    import shutil

    src, dst = Path(src_dir), Path(dst_dir)
    copied = []
    prof = read_profile(src)
    if prof is not None:
        write_profile(dst, prof)
        copied.append(PROFILE_FILE)
        for source in (prof.stats_corpus, prof.requests):
            if source.startswith("file:") and (src / source[5:]).is_file() and source[5:] not in copied:
                shutil.copy2(src / source[5:], dst / source[5:])
                copied.append(source[5:])
    if (src / FACTLM_META).is_file():
        shutil.copy2(src / FACTLM_META, dst / FACTLM_META)
        copied.append(FACTLM_META)
    return copied


def resolve_layer(model_dir: str | os.PathLike, override: int | None) -> int:
    """The edit layer: ``override`` (``--layer``), else the profile's, else a named error."""
    if override is not None:
        return override
    prof = read_profile(model_dir)
    if prof is not None:
        return prof.edit_layer
    legacy = Path(model_dir) / FACTLM_META  # a fact LM folder written before profiles existed
    if legacy.is_file():
        try:
            layer = json.loads(legacy.read_text(encoding="utf-8")).get("edit_layer")
        except (OSError, ValueError, AttributeError, RecursionError):
            layer = None
        if isinstance(layer, int) and not isinstance(layer, bool) and layer >= 0:
            return layer
    raise ConfigError("no edit layer known for this model", where=f"{Path(model_dir) / PROFILE_FILE} (missing)",
                      fix="run `mobiedit trace --model M --write-profile` once, or pass --layer N")


#: the method-config sections a profile may set (:func:`profile_settings`); its ``success`` rule is
#: set through :data:`SUCCESS_FIELDS` (:func:`with_profile`, :func:`success_settings`)
PROFILE_SECTIONS = ("objective", "context")
#: every settings section of a profile — what ``mobiedit tune`` sweeps (``--grid SECTION.KEY=…``) and
#: writes: the method-config sections, the success rule and the forward-only search's settle phase
TUNABLE_SECTIONS = PROFILE_SECTIONS + ("success", "settle")


def profile_settings(model_dir: str | os.PathLike | None, method: str | None = None) -> dict:
    """The config settings the profile of ``model_dir`` carries for ``method`` (a name of
    :data:`PROFILE_METHODS`; None: the shared settings only) — ``{"objective": {...}, "context":
    {...}}``, the method's own (``methods.<method>``) over the shared ones key by key, plus its own
    :data:`METHOD_SECTIONS` (``zo``, ``quant``), empty sections left out, ``{}`` without a profile.
    Every path that builds a method config for this model (``edit``, ``bench``, ``sequential``,
    ``tune``, ``export``, the demo) merges them over the defaults, under the user's own config
    (``mobiedit tune`` chooses them)."""
    prof = read_profile(model_dir) if model_dir is not None else None
    if prof is None:
        return {}
    own = prof.methods.get(method, {}) if method is not None else {}
    out = {name: _deep_update(getattr(prof, name), own.get(name, {})) for name in PROFILE_SECTIONS}
    out.update({name: dict(own[name]) for name in METHOD_SECTIONS.get(method, ()) if name in own})
    return {name: value for name, value in out.items() if value}


def _deep_update(base: dict, over: dict) -> dict:
    """A copy of ``base`` with ``over`` merged into it, nested objects key by key."""
    out = dict(base)
    for key, value in over.items():
        out[key] = _deep_update(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def with_profile(cfg, model_dir: str | os.PathLike | None, section: str | None = None, *, method: str):
    """``cfg`` (a dataclass config of ``method``'s search, a name of :data:`PROFILE_METHODS`) with
    :func:`profile_settings` of ``model_dir`` for that method merged over it (under
    ``cfg.<section>`` when given, e.g. an export config's ``edit``), and the profile's
    ``success`` rule on the fields of :data:`SUCCESS_FIELDS` the target has (and the method's
    :data:`METHOD_SECTIONS` where the target has them); an error names ``DIR/mobiedit.json``.
    Unchanged without a profile or settings."""
    from .config_io import merge

    if method not in PROFILE_METHODS:
        raise ValueError(f"method {method!r} is not one of {PROFILE_METHODS}")  # a caller's bug, not input
    prof = profile_settings(model_dir, method)
    target = getattr(cfg, section) if section else cfg
    for name in METHOD_SECTIONS[method]:
        if name in prof and not hasattr(target, name):  # an export's edit section: the bundle's recipe
            del prof[name]                                # takes zo (export.recipe.with_search)
            log.debug("profile methods.%s.%s does not apply to %s", method, name, type(target).__name__)
    for key, value in success_settings(model_dir).items():
        if hasattr(target, SUCCESS_FIELDS[key]):
            prof[SUCCESS_FIELDS[key]] = value
        else:  # ROME's search has no NLL margin: its stop is early_loss
            log.debug("profile success.%s does not apply to %s", key, type(target).__name__)
    settle = settle_settings(model_dir)
    if settle and hasattr(target, "settle"):
        prof["settle"] = settle
    elif settle:  # ROME's Adam keeps stepping under its decay after the target: no settle phase
        log.debug("profile settle does not apply to %s", type(target).__name__)
    if not prof:
        return cfg
    return merge(cfg, {section: prof} if section else prof, str(Path(model_dir) / PROFILE_FILE))


def success_settings(model_dir: str | os.PathLike | None) -> dict:
    """The success rule the profile of ``model_dir`` sets (``{"nll": ..., "fraction": ...}``, either
    may be absent; ``{}`` without a profile): what :func:`with_profile` merges into method configs
    and ``mobiedit export`` into the bundle's recipe, so the phone judges edits as the desktop does."""
    prof = read_profile(model_dir) if model_dir is not None else None
    return dict(prof.success) if prof is not None else {}


def search_settings(model_dir: str | os.PathLike | None) -> dict:
    """The forward-only search's estimator settings the profile of ``model_dir`` sets
    (``methods.mobiedit.zo``, :class:`~mobiedit.zo.ZOConfig` fields; ``{}`` without them): what
    ``mobiedit export`` merges into the bundle's recipe, so the phone searches as the desktop does."""
    return profile_settings(model_dir, "mobiedit").get("zo", {})


def settle_settings(model_dir: str | os.PathLike | None) -> dict:
    """The forward-only search's settle phase the profile of ``model_dir`` sets
    (:class:`~mobiedit.recipes.Settle` fields; ``{}`` without a profile or section): merged into
    method configs that have one (:func:`with_profile`) and by ``mobiedit export`` into the bundle's
    recipe."""
    prof = read_profile(model_dir) if model_dir is not None else None
    return dict(prof.settle) if prof is not None else {}


def config_key(key: str) -> str:
    """A profile setting's dotted key as the method config names it: ``success.nll`` ->
    ``success_nll`` (:data:`SUCCESS_FIELDS`); ``objective.*`` / ``context.*`` unchanged."""
    section, _, leaf = key.partition(".")
    return SUCCESS_FIELDS.get(leaf, key) if section == "success" else key


def check_not_tuned_on(model_dir: str | os.PathLike, requests_sha256: str, case_ids: list[str]) -> None:
    """Refuse to report on requests the profile's settings were tuned on (``notes.tune`` and each
    method's ``notes["tune:<method>"]`` of ``mobiedit tune``, same request file): evaluation stays
    apart from tuning."""
    prof = read_profile(model_dir)
    for key, tune in (prof.notes.items() if prof is not None else ()):
        if not (key == "tune" or key.startswith("tune:")) or not isinstance(tune, dict) \
                or tune.get("requests_sha256") != requests_sha256:
            continue
        shared = sorted(set(tune.get("case_ids", [])) & set(case_ids))
        if shared:
            raise ConfigError(f"{len(shared)} of these requests (e.g. {shared[0]}) tuned this model's profile",
                              where="--offset", fix=f"report on other requests: the tuning took {len(tune['case_ids'])} "
                                                    f"from offset {tune.get('offset')} of {tune.get('requests')}")


def with_layer(profile: ModelProfile, layer: int, reason: str) -> ModelProfile:
    return replace(profile, edit_layer=layer, layer_reason=reason)
