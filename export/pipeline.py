"""Export stages: prepare → models → modules → capture (+ lint) → lower.

:func:`mobiedit.export.bundle.export_bundle` runs them in order; tests and the benchmark call
single stages (e.g. only the ``edit`` program). Every stage is a plain function of its inputs.

* :func:`prepare` loads the HF model (eager attention), resolves the edit layer, generates the
  context templates (seeded) and computes the key statistics C⁻¹.
* :func:`program_models` returns the model copies the programs are built on: the inference
  model (prefill / decode) and the edit-side model (prefix / edit), quantized per config.
* :func:`build_modules` / :func:`capture` / :func:`lower_programs` build, ``torch.export`` (and
  lint) and lower the programs; QDQ calibration feeds come from :mod:`.calibration`.
"""
from __future__ import annotations

import copy
import dataclasses
import logging
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from mobiedit.errors import ConfigError
from mobiedit.families import get_module, n_layers
from mobiedit.models import LoadedModel, load_model
from mobiedit.quiet import NOTICE

from .adapters import ModelDims, check_positions, model_dims, use_static_attention
from .config import ExportConfig
from .graphs import EditModule, PrefixModule, StepModule
from .lint import LintConfig, lint_exported, lint_onnx, raise_if_findings
from .lower import export_graph, to_onnx, to_pte
from .quantize import (DeltaLinear, GatherQuantEmbedding, delta_model, float_islands, nbits_source, quantize_model,
                       weight_only_model)

log = logging.getLogger(__name__)

ROLES = ("prefill", "decode", "prefix", "edit")
INFERENCE = ("prefill", "decode")
PTE_FILE = "model.pte"


@dataclass
class Prepared:
    """Everything later stages need from the source model."""

    lm: LoadedModel
    layer: int
    dims: ModelDims
    templates: list[str]
    c_inv: torch.Tensor
    base_weight: torch.Tensor

    @property
    def module_name(self) -> str:
        return self.lm.family.mlp_out.format(self.layer)


def resolve_layer(model_dir: Path, layer: int | None) -> int:
    """``layer`` (``--layer``), else the model profile's edit layer (``mobiedit.json``, see
    :func:`mobiedit.profile.resolve_layer`), else ConfigError naming the fix."""
    from mobiedit.profile import resolve_layer as profile_layer

    return profile_layer(model_dir, layer)


def key_inverse(lm: LoadedModel, layer: int, cfg: ExportConfig) -> torch.Tensor:
    """(C + ridge·mean(diag C)·I)⁻¹ of the edit layer's keys in float32, or I without mom2. C is the
    eager path's (:func:`~mobiedit.editing.stats.cached_second_moment`: the same texts give the same
    cache entry), computed with the model's own attention, before :func:`prepare` switches it."""
    d_in = model_dims(lm.model, lm.family, layer).d_in
    if not cfg.edit.mom2:
        return torch.eye(d_in)
    from mobiedit.editing.stats import cached_second_moment
    from mobiedit.stats_corpus import stats_corpus_for

    corpus = stats_corpus_for(lm)
    texts = corpus.texts[: cfg.edit.stats_limit] if cfg.edit.stats_limit else corpus.texts
    c = cached_second_moment(lm.model, lm.family, layer, lm.tokenizer, texts, Path(lm.path),
                             source=corpus.source).double()
    lam = cfg.edit.ridge * torch.diagonal(c).mean()
    return torch.linalg.inv(c + lam * torch.eye(d_in, dtype=torch.float64)).float()


def check_exportable(family) -> None:
    """The bundle's edit programs add the delta to the residual stream with one RoPE table: a
    family whose MLP output is normalised before the residual add, or whose layers have RoPE
    tables of their own (Gemma-3), is refused before any work, naming what does run it."""
    why = [text for field, text in ((family.mlp_post_norm, "its MLP output is normalised before the residual"),
                                    (family.layer_types_attr, "its layers have RoPE tables of their own"))
           if field is not None]
    if why:
        raise ConfigError(f"model family {family.name!r} cannot be exported to a bundle yet ({'; '.join(why)})",
                          where="model family", fix="edit it with `mobiedit edit` (the eager path runs it exactly), "
                          "or export a Llama/Qwen2/GPT-2 family model")


def prepare(model_dir: str | Path, cfg: ExportConfig) -> Prepared:
    """Load the model and compute the per-model edit context (templates, C⁻¹, base weight). The
    templates and C are the eager path's own (cached: :mod:`mobiedit.editing.template_cache`,
    :func:`~mobiedit.editing.stats.cached_second_moment`), computed with the model's attention
    before it is switched to the static one the programs are captured with."""
    from mobiedit.editing.template_cache import cached_context_templates

    lm = load_model(model_dir)
    check_exportable(lm.family)
    layer = resolve_layer(Path(model_dir), cfg.edit.layer)
    if layer >= n_layers(lm.model, lm.family) - 1:
        raise ConfigError(f"layer {layer} leaves no layer after it", where="ExportConfig.edit.layer",
                          fix=f"use a layer < {n_layers(lm.model, lm.family) - 1}")
    dims = model_dims(lm.model, lm.family, layer)
    check_positions(dims, cfg.inference.max_seq_len + cfg.inference.prefill_chunk, "ExportConfig.inference")
    check_positions(dims, cfg.edit_shapes.tokens, "ExportConfig.edit_shapes")
    templates = cached_context_templates(lm.model, lm.tokenizer, cfg.edit.context,
                                         torch.Generator().manual_seed(cfg.edit.seed), Path(lm.path))
    if len(templates) + 1 > cfg.edit_shapes.rows:
        raise ConfigError(f"{len(templates)} context templates + 1 KL prompt need {len(templates) + 1} rows",
                          where="ExportConfig.edit_shapes.rows", fix="raise rows or use fewer context templates")
    c_inv = key_inverse(lm, layer, cfg)
    use_static_attention(lm.model)
    base = get_module(lm.model, lm.family.mlp_out, layer).weight.detach().clone()
    return Prepared(lm=lm, layer=layer, dims=dims, templates=templates, c_inv=c_inv, base_weight=base)


def fit_edit_shapes(prep: Prepared, cfg: ExportConfig, requests: list) -> ExportConfig:
    """``cfg`` with its edit shapes grown so that every request's prompt batch (built with the
    bundle's context templates and objective) fits the edit programs."""
    from .packing import fit_shapes, requests_needs

    shapes = fit_shapes(cfg.edit_shapes, requests_needs(prep.lm.tokenizer, requests, prep.templates, cfg.edit.objective))
    check_positions(prep.dims, shapes.tokens, "ExportConfig.edit_shapes (fitted to the requests)")
    if shapes != cfg.edit_shapes:
        log.log(NOTICE, "edit shapes fitted to %d requests: %s", len(requests), shapes)
    return dataclasses.replace(cfg, edit_shapes=shapes)


def program_models(prep: Prepared, cfg: ExportConfig) -> dict[str, torch.nn.Module]:
    """{"inference", "prefix", "edit"}: the (possibly identical) models the programs are built on.

    The source model is never changed; quantized schemes work on deep copies. Copies share the
    same embedding treatment so identical tensors are stored once in a ``.pte``.
    """
    q, base, fam = cfg.quant, prep.lm.model, prep.lm.family
    models = {"inference": base, "prefix": base, "edit": base}
    if q.scheme in ("8da8w", "8da4w"):
        models["inference"] = copy.deepcopy(base)
        quantize_model(models["inference"], fam, prep.layer, q)
    edit = q.resolved_edit_scheme
    if edit == "delta":
        models["prefix"] = models["inference"]
        models["edit"] = delta_model(models["inference"], fam, prep.layer, cfg.edit_shapes.rows, q)
    elif edit == "w8":
        w8 = copy.deepcopy(base)
        weight_only_model(w8, fam, prep.layer)
        inf_embed = get_module(models["inference"], fam.embed)
        if isinstance(inf_embed, GatherQuantEmbedding):
            parent, _, child = fam.embed.rpartition(".")
            setattr(w8.get_submodule(parent) if parent else w8, child, inf_embed)
        models["prefix"] = models["edit"] = w8
    elif edit in ("8da8w", "8da4w"):
        models["prefix"] = models["edit"] = models["inference"]
    elif edit == "nbits":
        models["prefix"] = models["edit"] = nbits_source(base, fam, prep.layer, q)
    return models


def build_modules(prep: Prepared, models: dict[str, torch.nn.Module], cfg: ExportConfig,
                  roles: tuple[str, ...] = ROLES) -> dict[str, torch.nn.Module]:
    """The program modules of ``roles`` (see :mod:`.graphs`)."""
    fam, layer, inf = prep.lm.family, prep.layer, cfg.inference
    make = {
        "prefill": lambda: StepModule(models["inference"], fam, layer, inf.prefill_chunk, inf),
        "decode": lambda: StepModule(models["inference"], fam, layer, 1, inf),
        "prefix": lambda: PrefixModule(models.get("prefix", models["edit"]), fam, layer, cfg.edit_shapes, inf.slots),
        "edit": lambda: EditModule(models["edit"], fam, layer, cfg.edit_shapes,
                                   base_row=any(isinstance(m, DeltaLinear) for m in models["edit"].modules())),
    }
    return {r: make[r]().eval() for r in roles}


def role_scheme(role: str, cfg: ExportConfig) -> str:
    """The quantization a program carries (``delta`` prefix programs run the inference model)."""
    edit = cfg.quant.resolved_edit_scheme
    if role in INFERENCE or (role == "prefix" and edit in ("delta", "same")):
        return cfg.quant.scheme
    return edit


def islands(prep: Prepared, cfg: ExportConfig) -> frozenset[str]:
    """Float islands as module paths (the edit layer's mlp_out, and the LM head by default)."""
    return frozenset(float_islands(prep.lm.family, prep.layer, cfg.quant))


def capture(modules: dict[str, torch.nn.Module], prep: Prepared, cfg: ExportConfig
            ) -> dict[str, torch.export.ExportedProgram]:
    """``torch.export`` every module; with ``cfg.lower.lint`` refuse programs the lint rejects
    (ATen-level quantization is checked here; ONNX QDQ is checked after quantization)."""
    eps = {}
    for role, mod in modules.items():
        eps[role] = export_graph(mod, mod.example_inputs(), role)
        if cfg.lower.lint:
            quantized = role_scheme(role, cfg) in ("8da8w", "8da4w", "w8", "delta")
            raise_if_findings(lint_exported(eps[role], LintConfig(quantized=quantized, islands=islands(prep, cfg))), role)
    return eps


def lower_programs(eps: dict[str, torch.export.ExportedProgram], modules: dict[str, torch.nn.Module],
                   folder: Path, prep: Prepared, cfg: ExportConfig,
                   calib: dict[str, list[dict[str, torch.Tensor]]] | None = None) -> dict[str, dict]:
    """Lower to ``folder``; returns the manifest's ``programs`` entries (file, method, inputs, outputs).

    ExecuTorch: one ``model.pte`` with a method per program. ONNX: ``<role>.onnx`` each, QDQ'd
    with ``calib`` feeds when the role's scheme is ``qdq_a16w8``.
    """
    io = {r: modules[r].io() for r in eps}
    if cfg.lower.runtime == "executorch":
        to_pte(eps, folder / PTE_FILE)
        return {r: {"file": PTE_FILE, "method": r, "inputs": io[r][0], "outputs": io[r][1]} for r in eps}
    out = {}
    for role, ep in eps.items():
        path = folder / f"{role}.onnx"
        inputs, outputs = io[role]
        scheme = role_scheme(role, cfg)
        if scheme == "qdq_a16w8":
            _onnx_qdq(ep, path, inputs, outputs, prep, cfg, (calib or {}).get(role))
        elif scheme == "nbits":
            _onnx_nbits(ep, path, inputs, outputs, prep, cfg)
        else:
            to_onnx(ep, path, inputs, outputs, cfg.lower.opset)
        out[role] = {"file": path.name, "method": None, "inputs": inputs, "outputs": outputs}
    return out


def _onnx_qdq(ep, path: Path, inputs: list[str], outputs: list[str], prep: Prepared, cfg: ExportConfig,
              feeds: list[dict[str, torch.Tensor]] | None) -> None:
    import onnx

    from .onnx_qdq import qdq_quantize

    if not feeds:
        raise ConfigError("static QDQ needs calibration feeds", where=f"program '{path.stem}'",
                          fix="build them with mobiedit.export.calibration.calibration_feeds")
    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        fp32 = Path(tmp) / path.name
        to_onnx(ep, fp32, inputs, outputs, cfg.lower.opset)
        np_feeds = [{k: v.detach().cpu().numpy() for k, v in f.items() if k in inputs} for f in feeds]
        info = qdq_quantize(fp32, path, np_feeds, set(islands(prep, cfg)), cfg.quant)
    if cfg.lower.lint:
        lcfg = LintConfig(quantized=True, islands=islands(prep, cfg), island_nodes=frozenset(info["excluded"]))
        raise_if_findings(lint_onnx(onnx.load(str(path)), lcfg), path.stem)


def _onnx_nbits(ep, path: Path, inputs: list[str], outputs: list[str], prep: Prepared, cfg: ExportConfig) -> None:
    """Lower fp32, then block-quantize the weights (:func:`~mobiedit.export.onnx_nbits.nbits_quantize`)."""
    import onnx

    from .onnx_nbits import nbits_quantize

    with tempfile.TemporaryDirectory(dir=path.parent) as tmp:
        fp32 = Path(tmp) / path.name
        to_onnx(ep, fp32, inputs, outputs, cfg.lower.opset, external=True)  # read back one weight at a time
        info = nbits_quantize(fp32, path, set(islands(prep, cfg)), cfg.quant, prep.lm.family.lm_head)
    if cfg.lower.lint:
        lcfg = LintConfig(quantized=True, islands=islands(prep, cfg), island_nodes=frozenset(info["excluded"]))
        raise_if_findings(lint_onnx(onnx.load(str(path)), lcfg), path.stem)
