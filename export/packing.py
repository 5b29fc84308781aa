"""Host side of the edit programs: one edit's prompt batch → padded program inputs, and back.

Contract: :func:`pack_edit` turns an :class:`~mobiedit.editing.context.EditInputs` into the fixed-size
inputs of the ``prefix`` program plus the delta-independent inputs of the ``edit`` program (mask
as int64 0/1, read-outs and their weights; the KL read-outs are ``kl_index`` = b·N + last_b for
the prefix program and ``kl_suffix_index`` = b·S + j for the edit program); :func:`edit_feed`
combines those with the ``prefix`` program's outputs. :func:`feed_from_state` pads an eager
:class:`~mobiedit.forward.prefix.PrefixState` into the same feed (the parity oracle). Padding
never changes a loss: padded rows see one zero key, padded read-outs have weight 0, padded keys
are masked.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from mobiedit.errors import BundleError
from mobiedit.forward.prefix import PrefixState, build_mask, readouts, suffix_geometry
from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.context import EditInputs
from mobiedit.editing.objective import decay_coefficient

from .config import EditShapes

I64 = torch.int64

#: every input name of the ``edit`` program a host feeds (cos / sin: rotary families only). A
#: bundle whose edit program takes another name was written for a different interface (e.g. the
#: earlier bool ``mask`` + ``kl_index`` one) and has to be re-exported.
EDIT_INPUTS = ("deltas", "h_suffix", "prefix_kv", "mask", "cos", "sin", "target_index", "target_label",
               "target_weight", "target_rows", "kl_suffix_index", "kl_ref", "kl_weight", "wd_scale")


@dataclass
class PackedEdit:
    """One edit, padded. ``prefix_feed``: inputs of the prefix program (without slots);
    ``static_feed``: the edit program's delta-independent inputs except the state tensors.
    ``n_rows`` / ``n_rewrite`` / ``target_len``: the real sizes (rows ≥ n_rows are padding)."""

    prefix_feed: dict[str, torch.Tensor]
    static_feed: dict[str, torch.Tensor]
    n_rows: int
    n_rewrite: int
    target_len: int
    objective: ObjectiveConfig


def _fit(name: str, need: int, have: int, field: str) -> None:
    if need > have:
        raise BundleError(f"this edit needs {name} {need}, the programs were exported for {have}",
                          where=f"manifest.json, field 'shapes.{field}'",
                          fix="shorten the prompt/target or re-export with larger edit shapes")


#: EditShapes field → (what the message calls it); ``tokens`` is prefix + suffix, checked on its own
_NEEDS = {"rows": "rows", "suffix": "suffix", "prefix": "prefix", "tokens": "tokens", "targets": "targets",
          "kl": "KL read-outs"}


def edit_needs(inputs: EditInputs) -> dict[str, int]:
    """The smallest :class:`EditShapes` sizes this edit fits in, by field name (``tokens`` too)."""
    B, T = inputs.batch.input_ids.shape
    s, _, S, P = suffix_geometry(inputs)
    rl = readouts(inputs, s)[2]
    return {"rows": B, "suffix": S, "prefix": P, "tokens": T, "targets": int((rl >= 0).sum()),
            "kl": B - inputs.n_rewrite}


def requests_needs(tok, requests: list, templates: list[str], objective: ObjectiveConfig) -> list[dict[str, int]]:
    """:func:`edit_needs` of each request's prompt batch (built with ``templates`` and ``objective``)."""
    from mobiedit.editing.context import build_edit_inputs

    return [edit_needs(build_edit_inputs(tok, r, templates, objective)) for r in requests]


def fit_shapes(shapes: EditShapes, needs: list[dict[str, int]]) -> EditShapes:
    """``shapes`` grown (never shrunk) so that every edit of ``needs`` fits; prefix absorbs a
    ``tokens`` need that prefix + suffix would not cover."""
    if not needs:
        return shapes
    top = {k: max(n[k] for n in needs) for k in _NEEDS}
    grown = {k: max(getattr(shapes, k), top[k]) for k in ("rows", "suffix", "prefix", "targets", "kl")}
    grown["prefix"] = max(grown["prefix"], top["tokens"] - grown["suffix"])
    return dataclasses.replace(shapes, **grown)


def pack_edit(inputs: EditInputs, shapes: EditShapes, objective: ObjectiveConfig) -> PackedEdit:
    """Pad one edit's prompt batch to ``shapes``. Raises BundleError when it does not fit."""
    b = inputs.batch
    B, T = b.input_ids.shape
    s, last, S, P = suffix_geometry(inputs)
    rr, rp, rl = readouts(inputs, s)
    is_t = rl >= 0
    n_kl = B - inputs.n_rewrite
    for field, need in edit_needs(inputs).items():
        _fit(_NEEDS[field], need, getattr(shapes, field), f"edit_{field}")
    Bp, Sp, Pp, N = shapes.rows, shapes.suffix, shapes.prefix, shapes.tokens
    ids = torch.zeros(Bp, N, dtype=I64)
    ids[:B, :T] = b.input_ids
    j = torch.arange(Sp)
    suffix_pos = torch.zeros(Bp, Sp, dtype=I64)
    suffix_pos[:B] = (s.view(B, 1) + j.view(1, Sp)).clamp(max=T - 1)
    subject_pos = torch.zeros(Bp, dtype=I64)
    subject_pos[:B] = s
    s_pad = torch.cat([s, torch.zeros(Bp - B, dtype=I64)])
    last_pad = torch.cat([last, torch.full((Bp - B,), -1, dtype=I64)])
    mask = build_mask(s_pad, last_pad, Sp, Pp).to(I64)  # int64 0/1: the programs take no bool inputs

    n_t = int(is_t.sum())
    t_index = torch.zeros(shapes.targets, dtype=I64)
    t_label = torch.zeros(shapes.targets, dtype=I64)
    t_weight = torch.zeros(shapes.targets)
    t_rows = torch.zeros(shapes.targets, Bp)
    t_index[:n_t] = rr[is_t] * Sp + rp[is_t]
    t_label[:n_t] = rl[is_t]
    t_weight[:n_t] = 1.0 / (inputs.target_len * inputs.n_rewrite)
    t_rows[torch.arange(n_t), rr[is_t]] = 1.0  # the program's ``correct`` counts hits per row
    kl_rows = rr[~is_t]
    kl_edit = torch.zeros(shapes.kl, dtype=I64)
    kl_edit[:n_kl] = kl_rows * Sp + rp[~is_t]
    kl_prefix = torch.zeros(shapes.kl, dtype=I64)
    kl_prefix[:n_kl] = kl_rows * N + last[kl_rows]
    kl_weight = torch.zeros(shapes.kl)
    kl_weight[:n_kl] = objective.kl_factor / n_kl
    return PackedEdit(
        prefix_feed={"input_ids": ids, "suffix_pos": suffix_pos, "subject_pos": subject_pos, "kl_index": kl_prefix},
        static_feed={"mask": mask, "target_index": t_index, "target_label": t_label, "target_weight": t_weight,
                     "target_rows": t_rows, "kl_suffix_index": kl_edit, "kl_weight": kl_weight},
        n_rows=B, n_rewrite=inputs.n_rewrite, target_len=inputs.target_len, objective=objective)


def wd_scale(objective: ObjectiveConfig, v_init: torch.Tensor) -> torch.Tensor:
    """``weight_decay / ‖v_init‖²`` as a [1] tensor (the objective's delta-norm coefficient)."""
    return torch.tensor([decay_coefficient(float(v_init.double().norm()), objective)], dtype=torch.float32)


def edit_feed(packed: PackedEdit, prefix_out: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The edit program's inputs (all but ``deltas``) from the prefix program's outputs."""
    feed = dict(packed.static_feed)
    for name in ("h_suffix", "prefix_kv", "cos", "sin", "kl_ref"):
        if name in prefix_out:
            feed[name] = prefix_out[name]
    feed["wd_scale"] = wd_scale(packed.objective, prefix_out["values"][0])
    return feed


def feed_from_state(state: PrefixState, packed: PackedEdit, shapes: EditShapes) -> dict[str, torch.Tensor]:
    """Pad an eager :class:`PrefixState` into the edit program's inputs (the parity oracle)."""
    B, S, P = state.shape
    Bp, Sp, Pp = shapes.rows, shapes.suffix, shapes.prefix
    d = state.h_suffix.shape[-1]
    h = torch.zeros(Bp, Sp, d)
    h[:B, :S] = state.h_suffix
    kv = []  # rows (2n + j)·Bp + b
    for k, v in zip(state.prefix_k, state.prefix_v):
        for t in (k, v):
            pad = torch.zeros(Bp, t.shape[1], Pp, t.shape[3])
            pad[:B, :, :P] = t
            kv.append(pad)
    out = {"h_suffix": h, "prefix_kv": torch.cat(kv), "values": state.v_init.view(1, -1)}
    if state.cos is not None:
        cos = torch.ones(Bp, Sp, state.cos.shape[-1])
        sin = torch.zeros(Bp, Sp, state.sin.shape[-1])
        cos[:B, :S], sin[:B, :S] = state.cos, state.sin
        out["cos"], out["sin"] = cos, sin
    n_kl = state.kl_ref.shape[0]
    ref = torch.full((shapes.kl, state.kl_ref.shape[-1]), -float(torch.log(torch.tensor(float(state.kl_ref.shape[-1])))))
    ref[:n_kl] = state.kl_ref
    out["kl_ref"] = ref
    return edit_feed(packed, out)
