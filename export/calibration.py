"""Representative program inputs, from the float model: QDQ calibration and quantization checks.

Contract: :func:`sample_edits` packs bundled CounterFact requests that fit the edit shapes;
:func:`calibration_feeds` returns, per program, input dicts recorded while the *float* eager
programs run those requests (prefill/decode during greedy generation of the rewrite prompt,
prefix on the packed rows, edit at ZO-like deltas); :func:`edit_correlation` scores a lowered
edit program against the float eager one across K perturbations.
"""
from __future__ import annotations

import math

import torch

from mobiedit.errors import BundleError
from mobiedit.forward.quant import centered_correlation
from mobiedit.requests import EditRequest, bundled_path, load_requests
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs

from .config import EditShapes, InferenceShapes
from .generate import CacheShape, greedy_tokens
from .packing import PackedEdit, edit_feed, pack_edit
from .runtime import EagerProgram, Program


class RecordingProgram(Program):
    """A program that runs ``inner`` and keeps every feed it was given."""

    def __init__(self, inner: Program) -> None:
        super().__init__(inner.inputs, inner.outputs)
        self.inner, self.feeds = inner, []

    def run(self, feed):
        self.feeds.append({k: (v.clone() if isinstance(v, torch.Tensor) else v) for k, v in feed.items()
                           if k in self.inputs})
        return self.inner.run(feed)


def sample_edits(tok, templates: list[str], objective: ObjectiveConfig, shapes: EditShapes, n: int
                 ) -> list[tuple[EditRequest, PackedEdit]]:
    """The first ``n`` bundled CounterFact requests whose batch fits ``shapes``."""
    out = []
    for req in load_requests(bundled_path("counterfact-edit-1k.json")):
        try:
            out.append((req, pack_edit(build_edit_inputs(tok, req, templates, objective), shapes, objective)))
        except BundleError:
            continue
        if len(out) == n:
            return out
    if not out:
        raise BundleError("no bundled request fits the edit shapes", where="ExportConfig.edit_shapes",
                          fix="raise suffix / prefix / targets")
    return out


def zo_deltas(K: int, d: int, scale: float, generator: torch.Generator, h: float, x0_norm: float) -> torch.Tensor:
    """K deltas like one ZO step: ``scale · (x0 + h·z)`` with ‖x0‖ = x0_norm·√d (normalised units)."""
    x0 = torch.randn(d, generator=generator)
    x0 = x0 / x0.norm() * x0_norm * math.sqrt(d)
    return (x0 + h * torch.randn(K, d, generator=generator)) * scale


def _programs(modules: dict[str, torch.nn.Module]) -> dict[str, Program]:
    return {r: EagerProgram(m, *m.io()) for r, m in modules.items()}


def calibration_feeds(float_modules: dict[str, torch.nn.Module], edits: list[tuple[EditRequest, PackedEdit]],
                      tok, inference: InferenceShapes, shapes: EditShapes, seed: int = 0
                      ) -> dict[str, list[dict[str, torch.Tensor]]]:
    """Per-role input dicts recorded from the float programs on ``edits`` (see module docstring).
    ``float_modules`` must hold ``prefix`` whenever it holds ``edit`` (the edit state comes from it)."""
    progs = _programs(float_modules)
    first = next(iter(float_modules.values()))
    dims = first.dims
    slots = {"slot_u": torch.zeros(inference.slots, dims.d_out), "slot_w": torch.zeros(inference.slots, dims.d_in)}
    feeds: dict[str, list] = {r: [] for r in float_modules}
    gen = torch.Generator().manual_seed(seed)
    shape = CacheShape(dims.num_layers, dims.num_kv_heads, inference.max_seq_len, dims.head_dim,
                       inference.prefill_chunk)
    for req, packed in edits:
        if "prefill" in progs and "decode" in progs:
            pre, dec = RecordingProgram(progs["prefill"]), RecordingProgram(progs["decode"])
            ids = tok(req.rewrite_prompt)["input_ids"][: inference.max_seq_len - 4]
            greedy_tokens(pre, dec, ids, 4, shape, slots["slot_u"], slots["slot_w"])
            feeds["prefill"] += pre.feeds
            feeds["decode"] += dec.feeds
        if "prefix" in progs or "edit" in progs:
            pfeed = {**packed.prefix_feed, **slots}
            if "prefix" in progs:
                feeds["prefix"].append(pfeed)
            if "edit" in progs:
                _, base, scale = check_reference(float_modules, packed, inference.slots)
                for h, x0n in ((0.05, 0.0), (0.5, 1.0)):
                    feeds["edit"].append({**base, "deltas": zo_deltas(shapes.K, dims.hidden_size, scale, gen, h, x0n)})
    return feeds


def check_reference(float_modules: dict[str, torch.nn.Module], packed: PackedEdit, slots: int
                    ) -> tuple[Program, dict[str, torch.Tensor], float]:
    """The export check's reference for one sampled edit: the float ``edit`` program, its feed for
    ``packed`` (the float ``prefix`` program's outputs with ``slots`` empty rank-one slots) and the
    value scale ‖v‖/√d (the unit of the search's h)."""
    dims = float_modules["edit"].dims
    progs = _programs({r: float_modules[r] for r in ("prefix", "edit")})
    empty = {"slot_u": torch.zeros(slots, dims.d_out), "slot_w": torch.zeros(slots, dims.d_in)}
    pout = progs["prefix"].run({**packed.prefix_feed, **empty})
    return progs["edit"], edit_feed(packed, pout), float(pout["values"][0].norm()) / math.sqrt(dims.d_out)


def float_check_reference(prep, cfg) -> tuple[EditRequest, Program, dict[str, torch.Tensor], float]:
    """:func:`check_reference` on the first bundled request that fits ``cfg.edit_shapes``, from the float
    programs of ``prep`` (:func:`mobiedit.export.pipeline.prepare`'s) under ``cfg``: the request with it."""
    from .pipeline import build_modules

    mods = build_modules(prep, {k: prep.lm.model for k in ("inference", "prefix", "edit")}, cfg, ("prefix", "edit"))
    req, packed = sample_edits(prep.lm.tokenizer, prep.templates, cfg.edit.objective, cfg.edit_shapes, 1)[0]
    return (req, *check_reference(mods, packed, cfg.inference.slots))


def edit_correlation(reference: Program, candidate: Program, base_feed: dict[str, torch.Tensor], K: int,
                     d: int, scale: float, seed: int = 1, draws: int = 4, *, h: float) -> dict[str, float]:
    """Centered Pearson correlation of ``candidate``'s K losses with ``reference``'s, at the deltas one
    step of the search feeds the edit program: ``scale · (x0 + h·z)`` (normalised units), ``h`` the
    bundle recipe's ``zo.h`` (:func:`mobiedit.export.recipe.model_recipe`), x0 = 0 (the search's start)
    and a random x0 of norm √d (a delta of the value's own norm) in turn, fresh directions each draw.

    Returns {"min", "mean"} over the ``draws`` for the full loss (what the ZO loop sees),
    {"network_min", "network_mean"} without the ``wd_scale·‖δ‖`` term (the model's own signal) and
    the ``h`` it perturbed at.
    """
    gen = torch.Generator().manual_seed(seed)
    full, net = [], []
    for i in range(draws):
        D = zo_deltas(K, d, scale, gen, h, float(i % 2))
        feed = {**base_feed, "deltas": D}
        a, b = reference.run(feed)["losses"], candidate.run(feed)["losses"]
        wd = base_feed["wd_scale"] * D.norm(dim=-1)
        full.append(centered_correlation(a, b))
        net.append(centered_correlation(a - wd, b - wd))
    return {"min": min(full), "mean": sum(full) / len(full), "network_min": min(net),
            "network_mean": sum(net) / len(net), "h": h}


#: below this centered correlation (network part, min over draws) an edit program's losses are
#: mostly quantization noise to the search: ``nbits`` int4 measures 0.85–0.93 on SmolLM2 and still
#: edits; per-block int8 activations (``nbits_compute`` int8) −0.50, per-token int8 ``same`` 0.04–0.75
#: on the project's own fact LM (docs/results.md; those figures at the draws before session 51, h 0.05
#: and 0.5).
SIGNAL_FLOOR = 0.8


#: per edit scheme, the export flags measured to keep the signal where it fell short (docs/results.md:
#: SmolLM2's QDQ a16w8 edit program 0.48 at its recipe's h, ``nbits`` int8 0.9996)
STRONGER_EDIT = {"qdq_a16w8": "--edit-quant nbits --nbits 8 (int8 weights, fp32 activations; CPU only: an NPU runs QDQ)",
                 "nbits": "--nbits 8 (where it was 4)"}


def weak_signal(corr: dict, scheme: str) -> str | None:
    """A warning when ``corr`` (:func:`edit_correlation`'s) says the search would read noise, else None."""
    if corr["network_min"] >= SIGNAL_FLOOR:
        return None
    h = f" at the search's h {corr['h']:g}" if "h" in corr else ""
    first = f"{STRONGER_EDIT[scheme]}, " if scheme in STRONGER_EDIT else ""
    return (f"the edit program ({scheme}) follows the float program's losses at correlation {corr['network_min']:.3f}{h} "
            f"(min over the check's draws; below {SIGNAL_FLOOR}): its search would read mostly quantization noise — "
            f"export with {first}more bits, fp32 compute or another --edit-quant")
