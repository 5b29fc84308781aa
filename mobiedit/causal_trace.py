"""Causal tracing (ROME, Meng et al. 2022, Sec. 2.1): where in the network does a fact live?

Protocol, per prompt (a request's ``rewrite_prompt`` answered by its ``target_true``):

1. **clean run** — record every traced state and ``P_clean``, the probability of the true
   answer's *first* token at the prompt's last position;
2. **corrupted run** — add Gaussian noise ``N(0, (noise · σ)²)`` to the token-embedding output at
   every subject token (``σ`` = standard deviation of the embedding module's output at the
   traced subjects' tokens, one scalar — ROME measures it on subjects too);
   read ``P_corrupt``;
3. **restored runs** — the same corruption (the *same* noise sample), but one state of one layer at
   one position is overwritten with its clean value; read ``P_restored``.

The **indirect effect** of that state is ``P_restored − P_corrupt``; results report its mean over
prompts (ROME's "average indirect effect") per layer, for every (state, position) pair.

States (module outputs, looked up through the family row of :mod:`mobiedit.families`, never by
branching on the architecture):

* ``resid`` — output of decoder block ``l`` (``Family.layer``): the residual stream after layer l;
* ``mlp``   — output of the MLP's output projection (``Family.mlp_out``), i.e. the MLP's
  contribution to the residual at layer l (ROME's edit site);
* ``attn``  — output of the attention sub-module (``Family.attn``), its contribution at layer l.

Positions: ``subject_last`` (the subject's last token, located with
:func:`mobiedit.prompts.subject_last_index`) and ``last`` (the prompt's last token). The low-level
:func:`trace_prompt` takes any named token indices.

**Window** (ROME's ``window=10`` for the MLP and attention traces): restoring a single MLP or
attention output barely moves a deep model (each is a small share of the residual), so the ``mlp``
and ``attn`` rows restore that state in a window of layers ``[l - w//2, l + w - w//2)`` clipped
to the model, and report it at ``l``; ``resid`` always restores one layer. :func:`default_window`
gives ROME's 10 on deep models and 1 (no window) on shallow ones.

Differences from ROME's code: one noise sample per prompt (ROME averages 10), σ is measured on the
traced prompts' subjects (ROME: on a set of subjects), and prompts the model does not know are not
filtered out (``trace --write-profile`` refuses a profile from them). Randomness comes only from the ``torch.Generator`` the
caller passes.
"""
from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import Mapping, Sequence

import torch

from .errors import ConfigError, RequestError
from .families import Family, get_module, n_layers
from .hooks import record, rewrite_output
from .prompts import prompt_ids, subject_last_index, target_ids
from .requests import EditRequest

log = logging.getLogger(__name__)

STATES: tuple[str, ...] = ("resid", "mlp", "attn")
POSITIONS: tuple[str, ...] = ("subject_last", "last")
WINDOWED: frozenset[str] = frozenset({"mlp", "attn"})


def default_window(layers: int) -> int:
    """ROME's restoration window (10 layers) where the model is deep enough, a third of the depth
    below that (1 on a 4-layer model: single-layer restoration)."""
    return max(1, min(10, layers // 3))


def window_layers(layer: int, window: int, layers: int) -> range:
    """The layers restored for a windowed state reported at ``layer`` (ROME's
    ``max(0, l - w//2) .. min(L, l - (-w//2))``)."""
    return range(max(0, layer - window // 2), min(layers, layer - (-window // 2)))


# ----------------------------------------------------------------------------- inputs

@dataclass(frozen=True)
class TracePrompt:
    """One tokenised prompt to trace.

    Attributes:
        case_id: the request it came from.
        input_ids: prompt tokens with the tokenizer's special tokens (``prompt_ids``).
        subject: token indices of the subject in ``input_ids`` (non-empty, ascending).
        target_id: first token of ``" " + target_true``.
    """

    case_id: str
    input_ids: tuple[int, ...]
    subject: range
    target_id: int

    def position(self, name: str) -> int:
        """Token index of a named position: ``subject_last`` or ``last``."""
        if name == "subject_last":
            return self.subject[-1]
        if name == "last":
            return len(self.input_ids) - 1
        raise ConfigError(f"unknown position {name!r}", where="causal trace positions",
                          fix=f"use one of {list(POSITIONS)}")


def subject_token_range(tok, text: str, subject: str) -> range:
    """Token indices, in ``prompt_ids(tok, text)``, of the first occurrence of ``subject``.

    The end is :func:`subject_last_index` (ROME's rule); the start is the length of the tokenised
    text before the subject (stripped of trailing space, which BPE attaches to the subject's first
    token). Raises :class:`RequestError` when the subject does not occur in ``text``.
    """
    last = subject_last_index(tok, text, subject)
    start = len(prompt_ids(tok, text[: text.find(subject)].rstrip()))
    if start > last:  # a merge across the boundary; keep the span non-empty
        log.debug("subject %r: prefix tokens run past the subject's last token; span = last token", subject)
        start = last
    return range(start, last + 1)


def prepare_prompt(tok, req: EditRequest) -> TracePrompt | None:
    """Tokenise ``req.rewrite_prompt`` for tracing; None when the request has no ``target_true``."""
    if req.target_true is None:
        return None
    text = req.rewrite_prompt
    ids = tuple(prompt_ids(tok, text))
    span = subject_token_range(tok, text, req.subject)
    if span[-1] >= len(ids):
        raise RequestError(f"subject tokens {list(span)} fall outside the {len(ids)}-token prompt",
                           where=f"request {req.case_id!r}, field 'subject'",
                           fix="check that the tokenizer splits the prompt at the subject's boundaries")
    return TracePrompt(case_id=req.case_id, input_ids=ids, subject=span,
                       target_id=target_ids(tok, req.target_true)[0])


# ----------------------------------------------------------------------------- model access

def state_modules(model: torch.nn.Module, family: Family, layer: int,
                  states: Sequence[str] = STATES) -> dict[str, torch.nn.Module]:
    """The module whose output is each traced state of ``layer`` (see the module docstring)."""
    templates = {"resid": family.layer, "mlp": family.mlp_out, "attn": family.attn}
    unknown = [s for s in states if s not in templates]
    if unknown:
        raise ConfigError(f"unknown state(s) {unknown}", where="causal trace states",
                          fix=f"use states from {list(STATES)}")
    return {s: get_module(model, templates[s], layer) for s in states}


def embedding_std(model: torch.nn.Module, family: Family, prompts: Sequence[TracePrompt]) -> float:
    """The noise unit σ: standard deviation of the embedding module's *output* at the subject
    tokens of ``prompts`` (ROME's ``collect_embedding_std``: measured on subjects). The output, not
    the weight matrix: families that scale their embeddings (Gemma multiplies by √hidden inside
    the module) are measured in the units the noise is added in."""
    embed = get_module(model, family.embed)
    ids = torch.tensor([t for p in prompts for t in (p.input_ids[i] for i in p.subject)], dtype=torch.long)
    with torch.no_grad():
        out = embed(ids.to(embed.weight.device).unsqueeze(0))
    return float(out.float().std())


def sample_noise(n_tokens: int, width: int, std: float, generator: torch.Generator) -> torch.Tensor:
    """``[n_tokens, width]`` Gaussian noise with standard deviation ``std``, drawn from ``generator``
    on the generator's device."""
    return torch.randn((n_tokens, width), generator=generator, device=generator.device) * std


def _corrupt(span: range, noise: torch.Tensor):
    """Output rewrite adding ``noise`` [len(span), d] at the ``span`` tokens of every row."""

    def fn(y: torch.Tensor) -> torch.Tensor:
        y = y.clone()
        y[:, span.start: span.stop] += noise.to(device=y.device, dtype=y.dtype)
        return y

    return fn


def _restore(rows: torch.Tensor, pos: torch.Tensor, clean: torch.Tensor):
    """Output rewrite setting ``y[rows[i], pos[i]] = clean[pos[i]]`` (``clean`` is [T, d])."""

    def fn(y: torch.Tensor) -> torch.Tensor:
        y = y.clone()
        y[rows, pos] = clean[pos].to(y.dtype)
        return y

    return fn


def _p_target(model: torch.nn.Module, ids: torch.Tensor, target_id: int) -> torch.Tensor:
    """P(target_id) at the last position of each row of ``ids`` [B, T] → [B] (float32)."""
    logits = model(input_ids=ids).logits[:, -1]
    return torch.softmax(logits.float(), dim=-1)[:, target_id]


# ----------------------------------------------------------------------------- one prompt

@dataclass(frozen=True)
class PromptTrace:
    """Trace of one prompt.

    Attributes:
        p_clean / p_corrupt: P(target first token) without / with the subject corrupted.
        p_restored: ``[len(states), len(positions), n_layers]``, P with that one state restored.
    """

    p_clean: float
    p_corrupt: float
    p_restored: torch.Tensor

    @property
    def indirect_effect(self) -> torch.Tensor:
        """``p_restored - p_corrupt``, same shape as ``p_restored``."""
        return self.p_restored - self.p_corrupt


@torch.inference_mode()
def trace_prompt(model: torch.nn.Module, family: Family, prompt: TracePrompt, noise: torch.Tensor,
                 positions: Mapping[str, int], states: Sequence[str] = STATES, window: int = 1) -> PromptTrace:
    """Trace ``prompt``: one clean run, one corrupted run, and one batched restored run per layer.

    Args:
        model: a causal LM of ``family`` (in eval mode; it is not modified).
        noise: ``[len(prompt.subject), hidden]``, added to the embedding output at the subject
            tokens in the corrupted and every restored run.
        positions: name → token index at which a state is restored (any index in the prompt).
        states: which of :data:`STATES` to restore.
        window: layers restored together for the :data:`WINDOWED` states (1: one layer).

    Returns:
        :class:`PromptTrace` whose ``p_restored[s, p, l]`` restores ``states[s]`` of layer ``l``
        at ``positions``' ``p``-th entry. Restoring ``resid`` of the last layer at the last
        position reproduces ``p_clean`` (the logits read only that state).
    """
    device = next(model.parameters()).device
    T = len(prompt.input_ids)
    if noise.shape[0] != len(prompt.subject):
        raise ConfigError(f"noise has {noise.shape[0]} rows for {len(prompt.subject)} subject tokens",
                          where="trace_prompt(noise=...)", fix="draw one noise row per subject token")
    bad = {k: v for k, v in positions.items() if not 0 <= v < T}
    if bad:
        raise ConfigError(f"positions {bad} outside the {T}-token prompt", where="trace_prompt(positions=...)",
                          fix=f"use token indices in [0, {T - 1}]")
    ids = torch.tensor([prompt.input_ids], dtype=torch.long, device=device)
    L = n_layers(model, family)
    mods = [state_modules(model, family, layer, states) for layer in range(L)]

    with contextlib.ExitStack() as stack:  # clean run, recording every state
        recs = [{s: stack.enter_context(record(m, inputs=False)) for s, m in layer_mods.items()}
                for layer_mods in mods]
        p_clean = float(_p_target(model, ids, prompt.target_id)[0])
    clean = [{s: rec.output[0] for s, rec in layer_recs.items()} for layer_recs in recs]  # [T, d] each

    embed = get_module(model, family.embed)
    with rewrite_output(embed, _corrupt(prompt.subject, noise)):
        p_corrupt = float(_p_target(model, ids, prompt.target_id)[0])

        # one row per (state, position); all rows corrupted, each restores its own state
        S, P = len(states), len(positions)
        pos = torch.tensor(list(positions.values()), dtype=torch.long, device=device)
        batch = ids.expand(S * P, T)
        p_restored = torch.empty((S, P, L))
        for layer in range(L):
            with contextlib.ExitStack() as stack:
                for i, s in enumerate(states):
                    rows = torch.arange(i * P, (i + 1) * P, device=device)
                    span = window_layers(layer, window, L) if s in WINDOWED else (layer,)
                    for j in span:
                        stack.enter_context(rewrite_output(mods[j][s], _restore(rows, pos, clean[j][s])))
                p_restored[:, :, layer] = _p_target(model, batch, prompt.target_id).view(S, P).cpu()
    return PromptTrace(p_clean=p_clean, p_corrupt=p_corrupt, p_restored=p_restored)


# ----------------------------------------------------------------------------- many prompts

@dataclass(frozen=True)
class TraceResult:
    """Mean causal trace over ``n`` prompts.

    Attributes:
        states / positions: the traced states and named positions (axes 0 and 1 of ``effects``).
        effects: ``[len(states), len(positions), n_layers]`` mean indirect effect
            ``P_restored − P_corrupt``.
        p_clean / p_corrupt: mean P(true first token) without / with the subject corrupted.
        n: prompts traced; ``skipped``: requests without ``target_true`` (not traced).
        noise: noise scale in units of ``noise_std`` (σ, see :func:`embedding_std`).
    """

    states: tuple[str, ...]
    positions: tuple[str, ...]
    effects: torch.Tensor
    p_clean: float
    p_corrupt: float
    n: int
    skipped: int
    noise: float
    noise_std: float
    window: int = 1

    @property
    def n_layers(self) -> int:
        return int(self.effects.shape[-1])

    @property
    def total_effect(self) -> float:
        """``p_clean − p_corrupt``: what a complete restoration recovers."""
        return self.p_clean - self.p_corrupt

    def rows(self) -> list[tuple[str, list[float]]]:
        """``("state@position", per-layer mean indirect effect)`` in table order."""
        return [(f"{s}@{p}", self.effects[i, j].tolist())
                for i, s in enumerate(self.states) for j, p in enumerate(self.positions)]

    def to_dict(self) -> dict:
        """JSON-ready form (``indirect_effect`` maps ``state@position`` to a per-layer list)."""
        return {"n": self.n, "skipped": self.skipped, "layers": self.n_layers, "noise": self.noise,
                "noise_std": self.noise_std, "window": self.window, "p_clean": self.p_clean, "p_corrupt": self.p_corrupt,
                "total_effect": self.total_effect, "states": list(self.states),
                "positions": list(self.positions), "indirect_effect": dict(self.rows())}


def trace_requests(model: torch.nn.Module, tok, family: Family, requests: Sequence[EditRequest], *,
                   generator: torch.Generator, noise: float = 3.0, states: Sequence[str] = STATES,
                   positions: Sequence[str] = POSITIONS, progress: bool = False,
                   window: int | None = None) -> TraceResult:
    """Causal trace averaged over ``requests`` (see the module docstring for the protocol).

    ``window``: see the module docstring (``None``: :func:`default_window` of the model's depth).
    Each request draws one noise sample from ``generator`` (so equal generator states and equal
    requests give identical results). Requests without ``target_true`` are skipped and counted.

    Raises:
        ConfigError: ``noise`` is not a positive finite number, or no request can be traced.
        RequestError: a request's subject does not occur in its prompt.
    """
    from tqdm import tqdm

    if window is not None and window < 1:
        raise ConfigError(f"window {window} is not a positive layer count", where="--window",
                          fix="pass a number of layers >= 1 (ROME: 10), or omit it for the default")
    if not (noise > 0 and noise != float("inf")):
        raise ConfigError(f"noise scale {noise} is not a positive finite number", where="--noise",
                          fix="pass a multiple of the embedding std, e.g. 3.0 (ROME's value)")
    prepared = [prepare_prompt(tok, req) for req in requests]
    prompts = [p for p in prepared if p is not None]
    skipped = len(prepared) - len(prompts)
    if not prompts:
        raise ConfigError("no request has a true answer to trace", where="requests",
                          fix="use requests with target_true (CounterFact 'ground_truth' / zsRE 'answers')")
    std = embedding_std(model, family, prompts)
    window = default_window(n_layers(model, family)) if window is None else window
    width = get_module(model, family.embed).weight.shape[1]
    effects, p_clean, p_corrupt = [], [], []
    for prompt in tqdm(prompts, desc="causal trace", unit="prompt", disable=not progress):
        eps = sample_noise(len(prompt.subject), width, noise * std, generator)
        tr = trace_prompt(model, family, prompt, eps, {p: prompt.position(p) for p in positions}, states,
                          window=window)
        effects.append(tr.indirect_effect)
        p_clean.append(tr.p_clean)
        p_corrupt.append(tr.p_corrupt)
        log.debug("%s: P clean %.4f corrupt %.4f", prompt.case_id, tr.p_clean, tr.p_corrupt)
    if skipped:
        log.warning("causal trace: skipped %d request(s) without target_true", skipped)
    n = len(effects)
    return TraceResult(states=tuple(states), positions=tuple(positions), effects=torch.stack(effects).mean(0),
                       p_clean=sum(p_clean) / n, p_corrupt=sum(p_corrupt) / n, n=n, skipped=skipped,
                       noise=float(noise), noise_std=std, window=window)


# ----------------------------------------------------------------------------- layer choice

#: below this clean P(true first token) the model does not know the traced facts well enough for
#: the trace to mean anything (it would trace noise)
KNOWN_P_MIN = 0.2


def choose_layer(result: TraceResult) -> tuple[int, str]:
    """ROME's rule: the layer whose MLP output at the subject's last token carries the largest mean
    indirect effect. Returns ``(layer, reason)``; the reason names the effect, the runner-up and
    the clean/corrupt probabilities so a profile records why."""
    i, j = result.states.index("mlp"), result.positions.index("subject_last")
    eff = result.effects[i, j]
    order = torch.argsort(eff, descending=True).tolist()
    best, second = order[0], order[1] if len(order) > 1 else order[0]
    reason = (f"causal trace over {result.n} known facts: MLP at the subject's last token has its largest "
              f"indirect effect at layer {best} (window {result.window}; {float(eff[best]):.4f}; runner-up layer {second} "
              f"{float(eff[second]):.4f}); P(true) clean {result.p_clean:.3f}, corrupted {result.p_corrupt:.3f}")
    return best, reason


def knows_facts(result: TraceResult) -> bool:
    """Whether the traced model knows the traced facts (clean P(true) at least KNOWN_P_MIN)."""
    return result.p_clean >= KNOWN_P_MIN
