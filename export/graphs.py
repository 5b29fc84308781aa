"""The four exported programs as ``nn.Module``s over a HF model's own submodules (nothing cloned).

All shapes are static; every per-call quantity is an input. Named inputs/outputs (in positional
order) are given by each module's :meth:`io`; :meth:`example_inputs` builds a valid input set.

* :class:`StepModule` (``prefill`` with C tokens, ``decode`` with 1): tokens at positions
  ``start .. start+C-1`` against a static KV cache of T positions (cache position j is visible iff
  ``j < start``; the chunk is causal within itself). Returns the logits at ``logit_index`` and the
  chunk's new K/V; the caller writes them into the cache at ``start``.
* :class:`PrefixModule` (``prefix``): one unedited forward of the edit's padded prompt rows →
  the per-edit state of :class:`EditModule`, the keys/values of the edit layer at the subject
  and the KL reference log-probs (the on-phone :func:`~mobiedit.forward.prefix.compute_prefix_state`).
* :class:`EditModule` (``edit``): :class:`~mobiedit.forward.graph.PrefixGraph` with every state
  tensor an input, padded, with read-out weights instead of boolean indexing. Every input is
  float32 or int64 (its attention mask too: no host runtime has to build bool tensors).

Slots: prefill/decode/prefix take ``slot_u`` [slots, d_out], ``slot_w`` [slots, d_in]; the edit
layer's ``mlp_out`` output becomes ``W x + Σ_s (w_s · x) u_s``.
"""
from __future__ import annotations

import torch

from mobiedit.editing.objective import kl_rows
from mobiedit.families import Family, get_module
from mobiedit.forward.kv import RecordingKV

from .adapters import (RankOneSlots, additive, blocks, embed, gqa_groups, model_dims, rank_one_slots, rotary,
                       run_blocks, tile_mask, use_static_attention)
from .config import EditShapes, InferenceShapes

I64, F32 = torch.int64, torch.float32


#: the attribute under which every program module holds the HF model (its only submodule), so
#: parameter and module paths in the exported graphs are ``model.<HF path>``
ROOT = "model"


def _specs(model: torch.nn.Module, family: Family, layer: int) -> tuple:
    use_static_attention(model)
    return model_dims(model, family, layer), family.rotary is not None


class _Parts:
    """Submodules a program calls, kept out of ``nn.Module`` registration (no duplicate paths)."""

    def __init__(self, model: torch.nn.Module, family: Family, layer: int, first: int) -> None:
        self.blocks = blocks(model, family, first)
        self.norm = get_module(model, family.final_norm)
        self.head = get_module(model, family.lm_head)
        self.mlp_out = get_module(model, family.mlp_out, layer)


class StepModule(torch.nn.Module):
    """``chunk`` tokens against a static KV cache of ``max_seq_len`` positions (prefill / decode).

    Inputs: tokens [1, C] int64; start [1] int64 (position of tokens[0]); logit_index [1] int64
    (chunk index whose logits are returned); kv_cache [2L, Hkv, T, hd] (row 2i: keys of layer i,
    2i+1: values); slot_u; slot_w.
    Outputs: logits [1, V]; new_kv [2L, Hkv, C, hd] (the chunk's K/V, to write at ``start``).
    """

    def __init__(self, model: torch.nn.Module, family: Family, layer: int, chunk: int, shapes: InferenceShapes):
        super().__init__()
        self.model, self.family, self.layer = model, family, layer
        self.dims, self.has_rope = _specs(model, family, layer)
        self.chunk, self.T, self.n_slots = chunk, shapes.max_seq_len, shapes.slots
        self.slots = RankOneSlots()
        self._parts = _Parts(model, family, layer, first=0)

    @staticmethod
    def io() -> tuple[list[str], list[str]]:
        return ["tokens", "start", "logit_index", "kv_cache", "slot_u", "slot_w"], ["logits", "new_kv"]

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        d = self.dims
        return (torch.zeros(1, self.chunk, dtype=I64), torch.zeros(1, dtype=I64), torch.zeros(1, dtype=I64),
                torch.zeros(2 * d.num_layers, d.num_kv_heads, self.T, d.head_dim),
                torch.zeros(self.n_slots, d.d_out), torch.zeros(self.n_slots, d.d_in))

    def forward(self, tokens, start, logit_index, kv_cache, slot_u, slot_w):
        C, T = self.chunk, self.T
        pos = start.view(1, 1) + torch.arange(C, dtype=I64).view(1, C)
        x = embed(self.model, self.family, tokens, pos)
        pe = rotary(self.model, self.family, x, pos)
        past_visible = torch.arange(T, dtype=I64).view(1, T) < start.view(1, 1)             # [1, T]
        causal = torch.ones(C, C, dtype=torch.bool).tril()                                 # [C, C]
        mask = torch.cat([past_visible.expand(C, T), causal], dim=1).view(1, 1, C, T + C)
        mask = tile_mask(additive(mask), gqa_groups(self.dims))
        cache = RecordingKV({i: (kv_cache[2 * i].unsqueeze(0), kv_cache[2 * i + 1].unsqueeze(0))
                             for i in range(self.dims.num_layers)})
        p = self._parts
        with rank_one_slots(p.mlp_out, self.slots, slot_u, slot_w):
            x = run_blocks(p.blocks, x, mask, pe, cache)
        h = x[0].index_select(0, logit_index)                                               # [1, d]
        logits = p.head(p.norm(h))
        new_kv = torch.cat([t for i in range(self.dims.num_layers) for t in cache.new[i]], dim=0)
        return logits, new_kv


class PrefixModule(torch.nn.Module):
    """One forward of the padded prompt rows → the edit program's per-edit state.

    Inputs: input_ids [B, N] (right-padded, N = prefix + suffix); suffix_pos [B, S] (s_b + j,
    clamped to the row); subject_pos [B]; kl_index [R_kl] (flat b*N + last_b of each KL row);
    slot_u; slot_w.
    Outputs: h_suffix [B, S, d] (output of layer l at suffix_pos); prefix_kv [2(L-l-1)·B, Hkv, P, hd]
    (K/V of layers > l at positions < P; rows (2n+j)·B + b: layer l+1+n, j = 0 keys / 1 values); cos, sin [B, S, hd] (rotary families only); kl_ref
    [R_kl, V] (log-probs at kl_index); keys [B, d_in] / values [B, d_out] (edit layer ``mlp_out``
    input / slotted output at subject_pos).
    """

    def __init__(self, model: torch.nn.Module, family: Family, layer: int, shapes: EditShapes, slots: int):
        super().__init__()
        self.model, self.family, self.layer = model, family, layer
        self.dims, self.has_rope = _specs(model, family, layer)
        self.shapes, self.n_slots = shapes, slots
        self.slots = RankOneSlots()
        self._parts = _Parts(model, family, layer, first=0)

    def io(self) -> tuple[list[str], list[str]]:
        outs = ["h_suffix", "prefix_kv"] + (["cos", "sin"] if self.has_rope else []) + ["kl_ref", "keys", "values"]
        return ["input_ids", "suffix_pos", "subject_pos", "kl_index", "slot_u", "slot_w"], outs

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        s, d = self.shapes, self.dims
        return (torch.zeros(s.rows, s.tokens, dtype=I64), torch.zeros(s.rows, s.suffix, dtype=I64),
                torch.zeros(s.rows, dtype=I64), torch.zeros(s.kl, dtype=I64),
                torch.zeros(self.n_slots, d.d_out), torch.zeros(self.n_slots, d.d_in))

    def forward(self, input_ids, suffix_pos, subject_pos, kl_index, slot_u, slot_w):
        B, N = input_ids.shape
        P = self.shapes.prefix
        pos = torch.arange(N, dtype=I64).view(1, N).expand(B, N)
        x = embed(self.model, self.family, input_ids, pos)
        pe = rotary(self.model, self.family, x, pos)
        mask = tile_mask(additive(torch.ones(N, N, dtype=torch.bool).tril().view(1, 1, N, N)), gqa_groups(self.dims))
        cache = RecordingKV()
        seen: dict = {}
        p = self._parts
        low, high = p.blocks[: self.layer + 1], p.blocks[self.layer + 1:]
        with rank_one_slots(p.mlp_out, self.slots, slot_u, slot_w, seen):
            x = run_blocks(low, x, mask, pe, cache)
        rows = torch.arange(B, dtype=I64)
        h_suffix = x[rows.view(B, 1), suffix_pos]                                           # [B, S, d]
        keys = seen["key"][rows, subject_pos]
        values = seen["value"][rows, subject_pos]
        x = run_blocks(high, x, mask, pe, cache)
        hi = range(self.layer + 1, self.dims.num_layers)
        prefix_kv = torch.cat([t[:, :, :P] for i in hi for t in cache.new[i]], dim=0)
        h_kl = x.reshape(B * N, -1).index_select(0, kl_index)
        kl_ref = torch.log_softmax(p.head(p.norm(h_kl)).float(), dim=-1)
        outs = [h_suffix, prefix_kv]
        if self.has_rope:
            cos, sin = rotary(self.model, self.family, h_suffix, suffix_pos)
            outs += [cos, sin]
        return tuple(outs + [kl_ref, keys, values])


class EditModule(torch.nn.Module):
    """K value deltas → (losses [K], correct [K, B]) over a padded per-edit state (all inputs).

    Inputs: deltas [K, d] (d = d_out, the edited module's output size = the residual width);
    h_suffix [B, S, d]; prefix_kv [2(L-l-1)·B, Hkv, P, hd]; mask [B, 1, S, P+S] int64 (nonzero =
    may attend; turned into bool inside the graph, so hosts never build bool tensors); cos, sin
    [B, S, hd] (rotary families); target_index [R_t] (flat b*S + j); target_label [R_t];
    target_weight [R_t] (1/(target_len·n_rewrite), 0 = padding); target_rows [R_t, B] (1 at the
    read-out's row, else 0); kl_suffix_index [R_kl] (flat b*S + j, unlike the prefix program's
    ``kl_index``); kl_ref [R_kl, V]; kl_weight [R_kl] (kl_factor/n_kl, 0 = padding); wd_scale [1]
    (weight_decay/‖v_init‖²).
    loss_k = Σ_r w_r·NLL_r + Σ_r kw_r·KL_r + wd_scale·‖δ_k‖ — the objective of
    :mod:`mobiedit.editing.objective`; ``correct[k, b]`` = how many of row b's target tokens are the
    argmax: a sum of 0/1 terms, so an exact integer in float32 (a rewrite row holds iff it equals
    target_len).

    ``base_row``: also run δ = 0 as row group 0 (rows ``0..B-1``; its losses are dropped), which
    :class:`~mobiedit.export.quantize.DeltaLinear` needs to quantize only the deltas' effect.
    """

    def __init__(self, model: torch.nn.Module, family: Family, layer: int, shapes: EditShapes,
                 base_row: bool = False):
        super().__init__()
        self.model, self.family, self.layer = model, family, layer
        self.dims, self.has_rope = _specs(model, family, layer)
        self.shapes, self.base_row = shapes, base_row
        self._parts = _Parts(model, family, layer, first=layer + 1)

    def io(self) -> tuple[list[str], list[str]]:
        rope = ["cos", "sin"] if self.has_rope else []
        return (["deltas", "h_suffix", "prefix_kv", "mask"] + rope +
                ["target_index", "target_label", "target_weight", "target_rows", "kl_suffix_index", "kl_ref",
                 "kl_weight", "wd_scale"], ["losses", "correct"])

    def example_inputs(self) -> tuple[torch.Tensor, ...]:
        s, d = self.shapes, self.dims
        B, S, P = s.rows, s.suffix, s.prefix
        mask = torch.zeros(B, 1, S, P + S, dtype=I64)
        mask[..., 0] = 1
        rope = (torch.ones(B, S, d.head_dim), torch.zeros(B, S, d.head_dim)) if self.has_rope else ()
        return (torch.zeros(s.K, d.d_out), torch.zeros(B, S, d.hidden_size),
                torch.zeros(2 * (d.num_layers - self.layer - 1) * B, d.num_kv_heads, P, d.head_dim), mask, *rope,
                torch.zeros(s.targets, dtype=I64), torch.zeros(s.targets, dtype=I64), torch.zeros(s.targets),
                torch.zeros(s.targets, B), torch.zeros(s.kl, dtype=I64),
                torch.full((s.kl, d.vocab_size), -float(torch.log(torch.tensor(float(d.vocab_size))))),
                torch.zeros(s.kl), torch.zeros(1))

    def forward(self, deltas, h_suffix, prefix_kv, mask, *rest):
        if self.has_rope:
            cos, sin, *rest = rest
        t_idx, t_label, t_weight, t_rows, kl_idx, kl_ref, kl_weight, wd_scale = rest
        user_deltas = deltas
        if self.base_row:
            deltas = torch.cat([torch.zeros_like(deltas[:1]), deltas], dim=0)
        K = deltas.shape[0]
        B, S, d = h_suffix.shape

        def rep(t: torch.Tensor) -> torch.Tensor:  # [B, ...] -> [K*B, ...] (row k*B + b), rank kept
            return torch.cat([t] * K, dim=0)

        first = (h_suffix[:, :1].unsqueeze(0) + deltas.view(K, 1, 1, d)).reshape(K * B, 1, d)       # row k*B + b
        x = torch.cat([first, rep(h_suffix[:, 1:])], dim=1)                                      # [K*B, S, d]
        m = rep(tile_mask(additive(mask != 0), gqa_groups(self.dims)))
        pe = (rep(cos), rep(sin)) if self.has_rope else None
        Lr = prefix_kv.shape[0] // (2 * B)
        cache = RecordingKV({self.layer + 1 + n: (rep(prefix_kv[2 * n * B:(2 * n + 1) * B]),
                                                  rep(prefix_kv[(2 * n + 1) * B:(2 * n + 2) * B])) for n in range(Lr)})
        p = self._parts
        x = run_blocks(p.blocks, x, m, pe, cache)
        flat = x.reshape(K, B * S, d)                                                        # row k: edit k
        R_t = t_idx.shape[0]
        h = flat.index_select(1, torch.cat([t_idx, kl_idx]))
        logits = p.head(p.norm(h)).float()                                                   # [K, R, V]
        logp = torch.log_softmax(logits, dim=-1)
        lp_t = logp[:, :R_t].gather(-1, t_label.view(1, R_t, 1).expand(K, R_t, 1)).squeeze(-1)
        nll = -(lp_t * t_weight.view(1, R_t)).sum(-1)
        hit = (logits[:, :R_t].argmax(-1) == t_label.view(1, R_t)).to(F32)
        correct = (hit.unsqueeze(-1) * t_rows.unsqueeze(0)).sum(1)                 # [K, B] hit counts
        new = logp[:, R_t:]
        kl = (kl_rows(kl_ref, new) * kl_weight.view(1, -1)).sum(-1)
        if self.base_row:
            nll, kl, correct = nll[1:], kl[1:], correct[1:]
        wd = wd_scale * user_deltas.pow(2).sum(-1).sqrt()  # wd_scale = objective.decay_coefficient
        return nll + kl + wd, correct
