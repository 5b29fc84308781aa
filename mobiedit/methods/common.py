"""What every editing method shares: the per-model context and the outcome of one edit."""
from __future__ import annotations

import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from ..families import Family
from ..models import LoadedModel
from ..requests import EditRequest
from ..editing.config import ContextConfig
from ..editing.template_cache import cached_context_templates
from ..editing.stats import cached_second_moment

log = logging.getLogger(__name__)


#: progress callback of a long edit: ``(step, loss)`` after every optimisation step
StepFn = Callable[[int, float], None]


@dataclass
class ModelContext:
    """Per (model, layer) state reused by every edit: context templates and key statistics.

    Built once by :func:`prepare_context`; passed explicitly (no module-level caches).
    """

    templates: list[str]
    mom2: dict[int, torch.Tensor] = field(default_factory=dict)
    #: per layer: the null-space projector of the ``nullspace`` update rule (built from ``mom2``)
    projector: dict[int, torch.Tensor] = field(default_factory=dict)
    #: per layer: k̄ of each edit applied so far in this session, in order (the ``nullspace``
    #: rule's ``K_p``; a sequential session appends, an independent one never does)
    edited_keys: dict[int, list[torch.Tensor]] = field(default_factory=dict)
    #: per layer: the request of each key in ``edited_keys``, in the same order (what
    #: ``update.key_refresh`` re-reads the keys from)
    edited_requests: dict[int, list[EditRequest]] = field(default_factory=dict)

    def protect(self, layer: int, key: torch.Tensor, req: EditRequest) -> None:
        """Add an applied edit's key ``key`` at ``layer`` (of request ``req``) to the keys later
        solves of this session hold still."""
        self.edited_keys.setdefault(layer, []).append(key)
        self.edited_requests.setdefault(layer, []).append(req)

    def reread_keys(self, lm: LoadedModel) -> int:
        """Re-read from ``lm`` as it stands the protected keys of every layer above the lowest one
        this session protects keys of (``update.key_refresh``): a write below layer ``l`` moves
        ``l``'s keys, none at or above ``l`` does. Returns how many keys were re-read."""
        from ..editing.compute_k import template_keys

        layers = sorted(self.edited_keys)
        n = 0
        for layer in layers[1:]:
            reqs = self.edited_requests.get(layer, [])
            if len(reqs) != len(self.edited_keys[layer]):
                raise RuntimeError(f"layer {layer}: {len(self.edited_keys[layer])} protected keys, {len(reqs)} "
                                   "requests (ModelContext.protect keeps them in step)")
            self.edited_keys[layer][:] = [template_keys(lm.model, lm.family, layer, lm.tokenizer, self.templates,
                                                        r.rewrite_prompt, r.subject).mean(0) for r in reqs]
            n += len(reqs)
        return n


def prepare_context(lm: LoadedModel, layers: list[int], context: ContextConfig, stats_texts: list[str] | None,
                    generator: torch.Generator, progress: bool = False,
                    stats_source: dict | None = None) -> ModelContext:
    """Generate context templates (from ``generator``; cached per model, tokenizer, config and
    generator state: :mod:`mobiedit.editing.template_cache`) and load/compute C for each layer.

    ``stats_texts`` None disables the mom2 adjustment (C = I, ROME's ``mom2_adjustment=False``);
    ``stats_source`` (corpus name, version, licence) is recorded in the statistics cache.
    """
    templates = cached_context_templates(lm.model, lm.tokenizer, context, generator, Path(lm.path))
    ctx = ModelContext(templates=templates)
    if stats_texts is not None:
        for layer in layers:
            ctx.mom2[layer] = cached_second_moment(lm.model, lm.family, layer, lm.tokenizer, stats_texts,
                                                   Path(lm.path), progress=progress, source=stats_source)
    return ctx


@dataclass
class EditOutcome:
    """One edit's result: the rank-one factors and what it cost.

    ``loss_evals``: losses evaluated at distinct deltas (a batch of K counts K);
    ``sequences``: prompt sequences run through the model (rows × evaluations);
    ``forward_calls`` / ``backward_calls``: graph or model invocations.
    ``succeeded`` is the verdict of the edited model (:mod:`mobiedit.methods.verify`: the factors
    written, one forward, the method's success rule); ``loop_succeeded`` the search's own verdict,
    only its stop signal; ``loop_holds`` whether the search's graph shows the target at the found
    delta (the edited model's rule, on the graph the search ran: the like-for-like verdict; for
    ROME the same as ``loop_succeeded``); ``write`` the write check's figures; ``delta`` the
    searched value change [d] (model units) the factors write at the key. Without the write check (a config's
    ``verify_write`` False) ``succeeded`` is the loop's and ``loop_succeeded`` None. ``parts``: the
    rank-one parts a spread edit writes, lowest layer first (:mod:`mobiedit.spread`; empty: this
    outcome's own ``u``, ``w`` are the write).
    """

    method: str
    layer: int
    module: str
    u: torch.Tensor
    w: torch.Tensor
    succeeded: bool
    status: str
    loss_evals: int
    sequences: int
    forward_calls: int
    backward_calls: int
    wall_time: float
    losses: list[float]
    seed: int = 0
    config: dict = field(default_factory=dict)
    loop_succeeded: bool | None = None
    write: dict = field(default_factory=dict)
    key: torch.Tensor | None = None  # k̄, the edit's key averaged over the context templates
    distinct_evals: int | None = None  # loss evaluations at distinct deltas (None: = loss_evals)
    loop_holds: bool | None = None
    delta: torch.Tensor | None = None
    parts: tuple["EditOutcome", ...] = ()

    def summary(self) -> dict:
        return {k: getattr(self, k) for k in ("method", "layer", "module", "succeeded", "loop_succeeded", "loop_holds", "status",
                                              "loss_evals", "sequences", "forward_calls", "backward_calls",
                                              "wall_time", "write", "distinct_evals")}


def module_name(family: Family, layer: int) -> str:
    return family.mlp_out.format(layer)


#: the status of an edit refused before any search (:func:`refused_outcome`)
REFUSED = "REFUSED"


def refused_outcome(lm: LoadedModel, method: str, layer: int, reason: str) -> EditOutcome:
    """The outcome of an edit refused before any search (``reason``, e.g. a subject at position 0:
    :func:`mobiedit.prompts.subject_context_error`): not succeeded, zero factors, no cost. Nothing
    is written for it, not even with ``force``."""
    from ..families import get_module

    weight = get_module(lm.model, lm.family.mlp_out, layer).weight
    d_out, d_in = weight.shape if lm.family.weight_out_in else weight.shape[::-1]
    return EditOutcome(method=method, layer=layer, module=module_name(lm.family, layer), u=torch.zeros(d_out),
                       w=torch.zeros(d_in), succeeded=False, status=REFUSED, loss_evals=0, sequences=0,
                       forward_calls=0, backward_calls=0, wall_time=0.0, losses=[],
                       config={"refused": reason})


def applies(out: EditOutcome, force: bool) -> bool:
    """Whether a session writes ``out``: it succeeded, or ``force`` and it was searched (a
    :data:`REFUSED` edit is never written). The one rule of ``edit``, batches and the sequential harness."""
    return bool(out.succeeded or (force and out.status != REFUSED))
