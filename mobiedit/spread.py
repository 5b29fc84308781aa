"""Multi-layer spreading (issue 16, MEMIT's form): one searched value change written over several
consecutive layers, each with its own rank-one update, instead of all of it into one matrix.

MEMIT (Meng et al. 2023, ``memit/memit_main.py``) finds the target hidden state ``z`` at the last
edited layer L and then, lowest layer first, has each layer i measure the hidden state at L as the
updates so far leave it and write ``(z − h_L) / (L − i + 1)`` of what is still missing at its own
key (ROME's direction with that layer's key statistics). Here the value search (either method,
forward-only or backprop, unchanged) finds ``δ`` at layer L's MLP output; the residual stream adds
that output as is, so ``z = h_L + δ``. The last layer takes what is left: the plain prompt's hidden
state at L is ``z`` to rounding. The layers below L share the change, so each matrix moves less —
more room for edit after edit (docs/reliability.md, section 5).

Each layer's part is one rank-one journal entry (undo stays bit-exact per entry; undoing one part
leaves the others). The verdict is the edited model's with every part written
(:func:`~mobiedit.methods.verify.says_now`); the parts are trial-written to judge them and the
weights restored bit-exactly, so the caller writes (and journals) them only when they hold. The
clamp ladder climbs on this verdict, not the one-layer write's: an edit whose one-layer write held
but whose spread write did not tries the next clamp (over 50 sequential MobiEdit edits on the fact
LM, judging the spread write only after the ladder had stopped applied 45 edits where one layer
applied 49, docs/reliability.md).
Families whose MLP output goes through a norm before the residual add (Gemma-3) are refused:
there ``h_L + δ`` is not what a change of the MLP output delivers.
"""
from __future__ import annotations

import dataclasses
import time

import torch

from .editing.config import written_layers
from .editing.update import write_factors
from .errors import ConfigError
from .families import Family, get_module
from .forward.quant import check_prequantized
from .hooks import record
from .methods.common import EditOutcome, ModelContext, module_name
from .methods.rome import factors_from_delta
from .methods.verify import says_now
from .models import LoadedModel
from .prompts import make_batch
from .requests import EditRequest


def block_output_at_subject(model: torch.nn.Module, family: Family, layer: int, tok, prompt: str,
                            subject: str) -> torch.Tensor:
    """[d] the hidden state after decoder block ``layer`` at the subject's last token of ``prompt``."""
    b = make_batch(tok, [prompt], None, subject=subject)
    dev = next(model.parameters()).device
    with torch.no_grad(), record(get_module(model, family.layer, layer), inputs=False, stop=True) as rec:
        model(input_ids=b.input_ids.to(dev), attention_mask=b.attention_mask.to(dev))
    return rec.output[0, int(b.subject_idx[0])].float()


def check_spreadable(lm: LoadedModel, layers: tuple[int, ...]) -> None:
    """Refuse (ConfigError) a family that norms its MLP output (naming ``update.spread``) and a
    pre-quantized model whose matrix of one of ``layers`` is not float
    (:func:`~mobiedit.forward.quant.check_prequantized`). :meth:`EditSession.open` calls it, before
    any search."""
    if lm.family.mlp_post_norm:
        raise ConfigError(f"{lm.family.name} norms the MLP output before the residual add "
                          f"({lm.family.mlp_post_norm.format(layers[-1])}): a spread share is not additive there",
                          where="update.spread", fix="use spread: 1 for this family")
    for layer in layers:  # a spread edit writes every layer it spans
        check_prequantized(lm.model, lm.family, layer)


def spread_parts(lm: LoadedModel, ctx: ModelContext, req: EditRequest, out: EditOutcome, layers: tuple[int, ...],
                 mom2_ridge: float, update) -> tuple[list[EditOutcome], float]:
    """Write ``out.delta`` (found at ``layers[-1]``'s MLP output) over ``layers`` into ``lm.model``,
    lowest first (see the module docstring). Returns the parts, one outcome per layer (``u``, ``w``,
    ``key``, its share as ``delta``), and how far the plain prompt's hidden state at the top layer
    stays from the target, relative to ``‖δ‖``. The weights are left written: the caller restores."""
    top = layers[-1]
    h = lambda: block_output_at_subject(lm.model, lm.family, top, lm.tokenizer, req.rewrite_prompt, req.subject)  # noqa: E731
    h_now = h()
    z = h_now + out.delta.float()
    parts = []
    for i, layer in enumerate(layers):
        share = (z - h_now) / (len(layers) - i)
        u, w, key = factors_from_delta(lm, ctx, req, layer, share, mom2_ridge, update)
        write_factors(get_module(lm.model, lm.family.mlp_out, layer).weight, u, w, lm.family.weight_out_in)
        parts.append(dataclasses.replace(out, layer=layer, module=module_name(lm.family, layer), u=u, w=w, key=key,
                                         delta=share, config={**out.config, "spread": len(layers), "spread_part": i}))
        h_now = h()  # as the parts so far leave it (after the last: the miss)
    return parts, float((h_now - z).norm() / out.delta.float().norm().clamp_min(1e-12))


def spread_written(session, req: EditRequest, out: EditOutcome, force: bool = False) -> EditOutcome:
    """The edit ``out`` (the search's) as the session's ``update.spread`` layers write it: the
    edit's outcome — the top part's factors, the search's ``delta``, the spread write's verdict as
    ``succeeded`` (the one-layer one kept as ``write["one_layer_holds"]``), every cost summed —
    with ``parts``, the outcomes to write, lowest layer first. Judged when the search found a
    delta that passed its own check or the one-layer write (or with ``force``); otherwise ``out``
    is returned as is, no parts. :meth:`~mobiedit.session.EditSession.edit` calls it on each clamp
    ladder rung, so the ladder climbs on this verdict. ``session``: an
    :class:`~mobiedit.session.EditSession` (opened: :func:`check_spreadable` passed); its model is
    left as it was."""
    if out.delta is None or not (out.succeeded or out.loop_succeeded or force):
        return out
    lm, cfg, ctx = session.lm, session.cfg, session.ctx
    layers = written_layers(cfg.layer, cfg.update)
    t0 = time.perf_counter()
    saved = {layer: session.weight(layer).detach().clone() for layer in layers}
    try:
        parts, miss = spread_parts(lm, ctx, req, out, layers, cfg.mom2_ridge, cfg.update)
        held = says_now(lm, req, ctx, cfg.objective, cfg.layer, cfg.success_fraction)
    finally:
        for layer, w in saved.items():
            session.restore(layer, w)
    # forwards: h at the top before and after each part, keys (two) per part, the verdict (one)
    calls = out.forward_calls + 3 * len(layers) + 2
    top = dataclasses.replace(parts[-1], succeeded=held, loop_succeeded=out.loop_succeeded, forward_calls=calls,
                              wall_time=out.wall_time + time.perf_counter() - t0,
                              write={**out.write, "spread_holds": held, "spread_miss": miss,
                                     "one_layer_holds": out.succeeded})
    return dataclasses.replace(top, delta=out.delta, parts=tuple(parts[:-1]) + (top,))
