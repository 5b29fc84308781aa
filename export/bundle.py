"""Phone bundles (docs/bundle_format.md): write with :func:`export_bundle`, open with :func:`load_bundle`.

Contract: a bundle folder appears atomically and complete (``atomic_dir``; manifest.json is the
last file written into it, holding the sha256 and size of every other file except ``journal/``).
:func:`load_bundle` refuses — with a :class:`BundleError` naming the field — a newer
``format_version``, an unknown runtime, a missing or changed file, and unsafe file names, before
anything runs. A :class:`Bundle` then loads programs lazily.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict
from pathlib import Path

import torch
from safetensors.torch import load_file, save

from mobiedit.atomic import atomic_dir
from mobiedit.digest import files_sha256
from mobiedit.errors import BundleError
from mobiedit.journal import Journal, tensor_sha256
from mobiedit.journal_guard import check_bundle_journal
from mobiedit.jsonio import JSONProblem, loads_strict
from mobiedit.outputs import check_output_dir, mark_output, weights_bytes

from .config import RUNTIMES, ExportConfig
from .manifest_check import MAX_MANIFEST_BYTES, validate_sections
from .recipe import model_recipe
from .runtime import Program, open_program
from .tokenizer import BundleTokenizer, save_tokenizer

log = logging.getLogger(__name__)

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
TOKENIZER = "tokenizer.json"
KEYSTATS = "keystats.safetensors"
JOURNAL = "journal"


def pack_symmetric(m: torch.Tensor) -> torch.Tensor:
    """The upper triangle (row-major, diagonal included) of a symmetric matrix: half the bytes."""
    m = (m + m.T) / 2
    i, j = torch.triu_indices(m.shape[0], m.shape[0])
    return m[i, j].contiguous()


def unpack_symmetric(tri: torch.Tensor, n: int) -> torch.Tensor:
    """Inverse of :func:`pack_symmetric`."""
    i, j = torch.triu_indices(n, n)
    out = torch.empty(n, n, dtype=tri.dtype)
    out[i, j] = tri
    out[j, i] = tri
    return out


def _created_by() -> str:
    try:
        from importlib.metadata import version

        return f"mobiedit {version('mobiedit')}"
    except Exception:  # not installed as a distribution
        return "mobiedit"


class Stages:
    """The export's stages as a progress bar (``progress``) and their seconds (``seconds``, kept in
    ``manifest.checks.stage_seconds``): a SmolLM2-size export runs for tens of minutes, mostly in
    the lowering, and a user should see which stage it is in."""

    NAMES = ("prepare", "quantize", "capture", "lower", "check", "save")

    def __init__(self, progress: bool) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=len(self.NAMES), desc="export", unit="stage", disable=not progress,
                        bar_format="{desc}: {n}/{total} stages [{elapsed}]")
        self.seconds: dict[str, float] = {}
        self.name: str | None = None
        self.t0 = time.perf_counter()

    def __call__(self, name: str) -> None:
        """Close the running stage and start ``name`` (one of :attr:`NAMES`)."""
        self._close()
        self.name, self.t0 = name, time.perf_counter()
        self.bar.set_description_str(f"export: {name}")
        self.bar.refresh()

    def _close(self) -> None:
        if self.name is not None:
            self.seconds[self.name] = round(time.perf_counter() - self.t0, 1)
            log.info("export stage %s: %.1f s", self.name, self.seconds[self.name])
            self.bar.update(1)
        self.name = None

    def done(self) -> dict[str, float]:
        self._close()
        self.bar.close()
        return self.seconds


def export_bundle(model_dir: str | Path, out: str | Path, cfg: ExportConfig | None = None,
                  fit_requests: list | None = None, *, overwrite: bool = False, inputs: tuple = (),
                  progress: bool = False) -> Path:
    """Export ``model_dir`` (a local HF folder) to the bundle folder ``out`` (replaced atomically).

    Stages: prepare → quantize → capture + lint → lower → check (quantized edit programs:
    correlation of their losses with the float graph's, recorded in ``manifest.checks``) → save.
    ``fit_requests``: edit requests the edit programs must take; ``cfg.edit_shapes`` grows to the
    largest of them (with the bundle's own context templates). ``out`` passes
    :func:`mobiedit.outputs.check_output_dir` first (``overwrite``; ``inputs``: further paths the
    caller read, e.g. the request file). ``progress``: a bar of the stages on stderr. Returns ``out``.
    """
    from .calibration import calibration_feeds, check_reference, edit_correlation, sample_edits, weak_signal
    from .chat import save_chat_template
    from .pipeline import (ROLES, build_modules, capture, fit_edit_shapes, lower_programs, prepare,
                           program_models)

    cfg = cfg or ExportConfig()
    check_output_dir(out, "bundle", (model_dir, *inputs), overwrite, need_bytes=weights_bytes(model_dir) // 8)
    t0 = time.perf_counter()
    stage = Stages(progress)
    stage("prepare")
    prep = prepare(model_dir, cfg)
    if fit_requests:
        cfg = fit_edit_shapes(prep, cfg, fit_requests)
    # the edit recipe hosts use (export/recipe.py), with the model profile's success rule; checked up front
    recipe = model_recipe(model_dir, cfg.edit_shapes.K, cfg.edit.recipe)
    stage("quantize")
    modules = build_modules(prep, program_models(prep, cfg), cfg)
    edit_q = cfg.quant.resolved_edit_scheme != "fp32"
    need_float = edit_q or cfg.quant.scheme == "qdq_a16w8"
    float_modules = build_modules(prep, {"inference": prep.lm.model, "prefix": prep.lm.model, "edit": prep.lm.model},
                                  cfg) if need_float else modules
    tok = prep.lm.tokenizer
    edits = sample_edits(tok, prep.templates, cfg.edit.objective, cfg.edit_shapes,
                         cfg.quant.calibration_batches) if need_float else []
    calib = calibration_feeds(float_modules, edits, tok, cfg.inference, cfg.edit_shapes) \
        if "qdq_a16w8" in (cfg.quant.scheme, cfg.quant.resolved_edit_scheme) else None
    stage("capture")
    eps = capture(modules, prep, cfg)
    t_capture = time.perf_counter() - t0
    out = Path(out)
    with atomic_dir(out) as tmp:
        stage("lower")
        programs = lower_programs(eps, modules, tmp, prep, cfg, calib)
        stage("check")
        checks: dict = {"export_seconds": None}
        if edit_q and cfg.quant.check_draws:
            spec = programs["edit"]
            cand = open_program(cfg.lower.runtime, tmp / spec["file"], spec["method"], spec["inputs"], spec["outputs"],
                                exact_qdq=cfg.quant.scheme == "qdq_a16w8")
            ref, feed, scale = check_reference(float_modules, edits[0][1], cfg.inference.slots)
            checks["edit_correlation"] = edit_correlation(ref, cand, feed, cfg.edit_shapes.K,
                                                          prep.dims.hidden_size, scale, draws=cfg.quant.check_draws,
                                                          h=recipe.zo.h)
            log.info("edit program (%s) loss correlation with float: %s", cfg.quant.resolved_edit_scheme,
                     checks["edit_correlation"])
            if warning := weak_signal(checks["edit_correlation"], cfg.quant.resolved_edit_scheme):
                log.warning(warning)
        stage("save")
        probes = prep.templates + [r.rewrite_prompt for r, _ in edits[:4]] + ["Hello world. The capital of France is"]
        special = save_tokenizer(tok, tmp / TOKENIZER, probes)
        chat = save_chat_template(tok, tmp, model_dir)
        # serialized in memory and written by Python: safetensors' save_file creates its file 0600,
        # every other bundle file gets the usual 0666 minus the umask
        (tmp / KEYSTATS).write_bytes(save({"c_inv_triu": pack_symmetric(prep.c_inv),
                                           "base_weight": prep.base_weight.float().contiguous()},
                                          metadata={"module": prep.module_name}))
        Journal.open(tmp / JOURNAL)
        checks["export_seconds"] = round(time.perf_counter() - t0, 1)
        checks["capture_seconds"] = round(t_capture, 1)
        checks["stage_seconds"] = stage.done()
        manifest = _manifest(prep, cfg, programs, special, checks)
        manifest["recipe"] = recipe.as_manifest()
        manifest["chat"] = chat
        manifest["files"] = {p.name: {"sha256": files_sha256([p]), "bytes": p.stat().st_size}
                             for p in sorted(tmp.iterdir()) if p.is_file() and p.name != MANIFEST}
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True))
        mark_output(tmp, "bundle")  # not listed in files: hidden names are never bundle files
    log.info("wrote bundle %s in %.1fs (%s)", out, time.perf_counter() - t0, sorted(ROLES))
    return out


def _manifest(prep, cfg: ExportConfig, programs: dict, special: dict, checks: dict) -> dict:
    s, i = cfg.edit_shapes, cfg.inference
    return {
        "format_version": FORMAT_VERSION,
        "created_by": _created_by(),
        "runtime": cfg.lower.runtime,
        "model_family": prep.lm.family.name,
        "quantization": cfg.quant.scheme,
        "edit_quantization": cfg.quant.resolved_edit_scheme,
        "edit_layer": prep.layer,
        "edit_module": prep.module_name,
        "dims": prep.dims.manifest(),
        "shapes": {"max_seq_len": i.max_seq_len, "prefill_chunk": i.prefill_chunk, "edit_K": s.K,
                   "edit_rows": s.rows, "edit_suffix": s.suffix, "edit_prefix": s.prefix,
                   "edit_targets": s.targets, "edit_kl": s.kl, "edit_tokens": s.tokens},
        "slots": i.slots,
        "special_tokens": special,
        "programs": programs,
        "edit": {"templates": prep.templates, "objective": asdict(cfg.edit.objective), "mom2": cfg.edit.mom2,
                 "ridge": cfg.edit.ridge, "weight_out_in": prep.lm.family.weight_out_in,
                 "update": _update_section(cfg)},
        "checks": checks,
    }


def _update_section(cfg: ExportConfig) -> dict:
    """The manifest's ``edit.update``: the rule and ``rows_ridge``, and ``edited_weight`` for the
    rules that hold the applied edits' keys still."""
    from mobiedit.editing.update import PROTECTING_RULES

    sec = {"rule": cfg.edit.update_rule, "rows_ridge": cfg.edit.rows_ridge}
    if cfg.edit.update_rule in PROTECTING_RULES:
        sec["edited_weight"] = cfg.edit.edited_weight
    return sec


_REQUIRED = ("format_version", "runtime", "model_family", "edit_layer", "edit_module", "dims", "shapes", "slots",
             "special_tokens", "programs", "edit", "files")


def read_manifest(path: Path) -> dict:
    """Parse and validate manifest.json (everything but the file checksums)."""
    mpath = path / MANIFEST
    where = str(mpath)
    if not mpath.is_file():
        raise BundleError("no manifest.json", where=str(path), fix="pass a folder written by `mobiedit export`")
    try:
        if mpath.stat().st_size > MAX_MANIFEST_BYTES:
            raise BundleError(f"manifest is {mpath.stat().st_size} bytes (limit {MAX_MANIFEST_BYTES})", where=where,
                              fix="re-export the bundle")
        m = loads_strict(mpath.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, JSONProblem) as e:
        raise BundleError(f"unreadable manifest ({' '.join(str(e).split())[:200]})", where=where,
                          fix="re-export the bundle") from None
    if not isinstance(m, dict):
        raise BundleError("manifest is not a JSON object", where=where, fix="re-export the bundle")
    v = m.get("format_version")
    if not isinstance(v, int) or isinstance(v, bool) or v < 1:
        raise BundleError(f"invalid value {v!r}", where=f"{where}, field 'format_version'", fix="re-export the bundle")
    if v > FORMAT_VERSION:
        raise BundleError(f"bundle format version {v} is newer than this reader's ({FORMAT_VERSION})",
                          where=f"{where}, field 'format_version'", fix="upgrade mobiedit to read this bundle")
    for key in _REQUIRED:
        if key not in m:
            raise BundleError("missing field", where=f"{where}, field '{key}'", fix="re-export the bundle")
    if m["runtime"] not in RUNTIMES:
        raise BundleError(f"unknown runtime {m['runtime']!r}", where=f"{where}, field 'runtime'",
                          fix=f"use one of {RUNTIMES}")
    if not isinstance(m["slots"], int) or isinstance(m["slots"], bool) or m["slots"] < 1:
        raise BundleError(f"invalid value {m['slots']!r}", where=f"{where}, field 'slots'", fix="slots must be >= 1")
    if not isinstance(m["edit_layer"], int) or isinstance(m["edit_layer"], bool) or m["edit_layer"] < 0:
        raise BundleError(f"invalid value {m['edit_layer']!r}", where=f"{where}, field 'edit_layer'",
                          fix="re-export the bundle")
    for key, kind in (("model_family", str), ("edit_module", str), ("dims", dict), ("shapes", dict),
                      ("special_tokens", dict), ("programs", dict), ("edit", dict), ("files", dict)):
        if not isinstance(m[key], kind):
            raise BundleError(f"must be a JSON {'string' if kind is str else 'object'}, got {type(m[key]).__name__}",
                              where=f"{where}, field '{key}'", fix="re-export the bundle")
    files = m["files"]
    for name, meta in files.items():
        if ("/" in name or "\\" in name or name.startswith(".") or name == MANIFEST or not name
                or not name.isprintable()):
            raise BundleError(f"unsafe file name {name!r}", where=f"{where}, field 'files'", fix="re-export the bundle")
        if (not isinstance(meta, dict) or not isinstance(meta.get("sha256"), str)
                or not isinstance(meta.get("bytes"), int) or isinstance(meta.get("bytes"), bool)):
            raise BundleError("each entry must be {\"bytes\": int, \"sha256\": str}", where=f"{where}, field 'files[{name!r}]'",
                              fix="re-export the bundle")
    for role, spec in m["programs"].items():
        if not isinstance(spec, dict) or not isinstance(spec.get("file"), str) or spec["file"] not in files:
            raise BundleError(f"program file of {role!r} is not listed in files", where=f"{where}, field 'programs'",
                              fix="re-export the bundle")
    validate_sections(m, where)
    return m


def verify_files(path: Path, manifest: dict) -> None:
    """Check size and sha256 of every file listed in the manifest."""
    for name, meta in manifest["files"].items():
        p = path / name
        where = f"{path / MANIFEST}, field 'files.{name}'"
        if not p.is_file():
            raise BundleError("file is missing", where=where, fix="re-export the bundle")
        if p.stat().st_size != meta.get("bytes") or files_sha256([p]) != meta.get("sha256"):
            raise BundleError("sha256 / size mismatch: the file changed after export", where=where,
                              fix="re-export the bundle or restore the file")


class Bundle:
    """A verified bundle: manifest, tokenizer, key statistics, journal and lazily loaded programs."""

    def __init__(self, path: Path, manifest: dict) -> None:
        self.path, self.manifest = path, manifest
        self._programs: dict[str, Program] = {}
        self._loaded: dict = {}
        self._tok: BundleTokenizer | None = None
        self._base_sha: str | None = None

    @property
    def runtime(self) -> str:
        return self.manifest["runtime"]

    def program(self, role: str) -> Program:
        if role not in self._programs:
            spec = self.manifest["programs"].get(role)
            if spec is None:
                raise BundleError(f"no {role!r} program", where=f"{self.path / MANIFEST}, field 'programs'",
                                  fix="re-export the bundle")
            self._programs[role] = open_program(self.runtime, self.path / spec["file"], spec.get("method"),
                                                spec["inputs"], spec["outputs"], self._loaded,
                                                exact_qdq=self.manifest.get("quantization") == "qdq_a16w8")
        return self._programs[role]

    def tokenizer(self) -> BundleTokenizer:
        if self._tok is None:
            self._tok = BundleTokenizer(self.path / TOKENIZER, self.manifest["special_tokens"])
        return self._tok

    def keystats(self) -> dict[str, torch.Tensor]:
        """{"c_inv" [d_in, d_in], "base_weight"} (C⁻¹ is stored as its upper triangle)."""
        stats = load_file(str(self.path / KEYSTATS))
        d_in = self.manifest["dims"]["intermediate_size"]
        try:
            tri = stats.pop("c_inv_triu")
            if tri.dim() != 1 or tri.numel() != d_in * (d_in + 1) // 2:
                raise RuntimeError(f"c_inv_triu has shape {list(tri.shape)}, expected [{d_in * (d_in + 1) // 2}]")
            stats["c_inv"] = unpack_symmetric(tri, d_in)
        except (KeyError, RuntimeError) as e:
            raise BundleError(f"no valid c_inv_triu for d_in={d_in} ({e})", where=str(self.path / KEYSTATS),
                              fix="re-export the bundle") from None
        return stats

    def base_sha256(self) -> str:
        """tensor_sha256 of keystats' ``base_weight`` (what every journal entry must be based on)."""
        if self._base_sha is None:
            from safetensors import safe_open

            path = self.path / KEYSTATS
            try:
                with safe_open(str(path), framework="pt") as fh:
                    self._base_sha = tensor_sha256(fh.get_tensor("base_weight"))
            except Exception as e:  # noqa: BLE001 - safetensors' own error types for a bad file / key
                raise BundleError(f"no readable base_weight ({' '.join(str(e).split())[:150]})", where=str(path),
                                  fix="re-export the bundle") from None
        return self._base_sha

    def journal(self, readonly: bool = False) -> Journal:
        """The bundle's journal, refused (JournalError) when an entry was computed on another base
        weight or module. ``readonly``: a reader's open (a missing journal/ is not created)."""
        j = Journal.open(self.path / JOURNAL, readonly=readonly)
        if j.entries():
            check_bundle_journal(j, self.base_sha256(), self.manifest["edit_module"])
        return j

    def slots(self, journal: Journal | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """(slot_u, slot_w) holding the journal's active edits in id order (zero rows: empty)."""
        m, dims = self.manifest, self.manifest["dims"]
        u = torch.zeros(m["slots"], dims["d_out"])
        w = torch.zeros(m["slots"], dims["intermediate_size"])
        journal = journal or self.journal(readonly=True)
        active = journal.entries(active_only=True)
        if len(active) > m["slots"]:
            raise BundleError(f"{len(active)} active edits, the bundle has {m['slots']} slots",
                              where=str(self.path / JOURNAL), fix="undo some edits or re-export with more slots")
        for i, e in enumerate(active):
            if e.module != m["edit_module"]:
                raise BundleError(f"edit {e.id} is on {e.module!r}, the bundle edits {m['edit_module']!r}",
                                  where=str(self.path / JOURNAL), fix="use the journal written for this bundle")
            u[i], w[i] = journal.load_factors(e)
        return u, w

    def protected_keys(self, journal: Journal) -> torch.Tensor:
        """[n_active, d_in] the keys recorded with the journal's active edits, in id order (what the
        protecting write rules hold still). BundleError naming the entry when one has none (recorded
        before keys were kept): undo it, or export the bundle with a rule that does not protect."""
        keys = []
        for e in journal.entries(active_only=True):
            k = journal.load_key(e)
            if k is None:
                raise BundleError(f"edit {e.id} was recorded without its key, which edit.update.rule "
                                  f"{self.manifest['edit'].get('update', {}).get('rule')!r} holds still",
                                  where=str(self.path / JOURNAL), fix=f"undo edit {e.id} (mobiedit undo), or "
                                  "use a bundle exported with --update-rule rome or rows")
            keys.append(k)
        return torch.stack(keys) if keys else torch.zeros(0, self.manifest["dims"]["intermediate_size"])


def load_bundle(path: str | Path) -> Bundle:
    """Open and verify a bundle (see the module docstring)."""
    path = Path(path)
    manifest = read_manifest(path)
    verify_files(path, manifest)
    return Bundle(path, manifest)
