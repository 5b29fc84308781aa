"""The forward-only edit graph: K value deltas in, K losses out — no autograd anywhere.

Two implementations of the same objective (:mod:`mobiedit.editing.objective`):
  * :class:`PrefixGraph` reuses the per-edit :class:`PrefixState` and runs only layers > ``l``
    on the suffix positions (the product path);
  * :class:`FullGraph` runs the whole model on every prompt with the delta hooked in (the
    reference, and the "no prefix reuse" benchmark row).
Both implement :class:`mobiedit.driver.EditGraph`: ``(losses [K], correct [K, n_rewrite])`` where
``correct`` counts the target tokens that are the argmax in each rewrite prompt (a sum of 0/1
terms, exact in float32; ``correct == target_len``: the edit holds teacher-forced there), as the
exported edit program (:class:`mobiedit.export.graphs.EditModule`) does.
"""
from __future__ import annotations

import torch

from ..families import Family, get_module, n_layers
from ..hooks import add_at_positions, rewrite_output
from ..editing.config import ObjectiveConfig
from ..editing.context import EditInputs
from ..editing.objective import decay_term, kl_logprobs, kl_rows, nll_per_prompt
from .kv import RecordingKV
from .prefix import PrefixState
from .quant import low_head


def _readout(head: torch.nn.Module, h: torch.Tensor, label: torch.Tensor, max_elems: int,
             w_low: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """What the objective reads from the LM head at the read-outs ``h`` [K, R, d], computed over
    vocabulary slices so that the [K, R, V] logits never exist (each slice ≤ ``max_elems``
    values, and its weight rows upcast to fp32 one slice at a time). With ``w_low`` (the head's
    weight in bf16, ``quant.head_matmul`` "bf16") each slice's logits are the K read-outs' mean's
    in fp32 plus each one's difference from the mean on bf16 operands: the rounding scales with
    the perturbation's change of the logits, not with the logits.

    ``lse`` [K, R] logsumexp over the vocabulary; ``target`` [K, R] the logit of ``label`` (0 where
    label < 0); ``argmax`` [K, R] the first maximal token; ``kl`` [K, R_kl, V] the full logits of
    the KL read-outs (label < 0), the only rows whose whole distribution the loss needs.
    """
    W, b = head.weight, getattr(head, "bias", None)
    K, R, d = h.shape
    V = W.shape[0]
    h = h.float()
    if w_low is not None:
        ref = h.mean(0, keepdim=True)
        dh = (h - ref).to(w_low.dtype)
    rows = max(1, min(max_elems // (K * R), max_elems // d))
    is_t = label >= 0
    lab = label.clamp(min=0)
    lses = []
    best = h.new_full((K, R), -float("inf"))
    argmax = torch.zeros(K, R, dtype=torch.long, device=h.device)
    target = h.new_zeros(K, R)
    kl = h.new_empty(K, int((~is_t).sum()), V)
    for i in range(0, V, rows):
        bias = None if b is None else b[i:i + rows].float()
        if w_low is None:
            z = torch.nn.functional.linear(h, W[i:i + rows].float(), bias)
            lses.append(torch.logsumexp(z, dim=-1))
        else:
            z = torch.nn.functional.linear(dh, w_low[i:i + rows]).float()
            z += torch.nn.functional.linear(ref, W[i:i + rows].float(), bias)
        v, j = z.max(dim=-1)
        better = v > best  # strict: an earlier slice keeps a tie, as torch.argmax does
        best, argmax = torch.where(better, v, best), torch.where(better, j + i, argmax)
        inside = is_t & (lab >= i) & (lab < i + z.shape[-1])
        if inside.any():
            idx = (lab[inside] - i).view(1, -1, 1).expand(K, -1, 1)
            target[:, inside] = z[:, inside].gather(-1, idx).squeeze(-1)
        kl[..., i:i + z.shape[-1]] = z[:, ~is_t]
        if w_low is not None:  # the slice's logsumexp from its max, in place (z is not read again)
            lses.append(v + z.sub_(v.unsqueeze(-1)).exp_().sum(-1).log())
    return torch.logsumexp(torch.stack(lses, dim=-1), dim=-1), target, argmax, kl


def _readout_loss(head: torch.nn.Module, h: torch.Tensor, st_row: torch.Tensor, label: torch.Tensor,
                  n_rewrite: int, target_len: int, kl_ref: torch.Tensor, wd_term: torch.Tensor,
                  cfg: ObjectiveConfig, max_elems: int, w_low: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """Loss [K] and per-prompt target counts [K, n_rewrite] from the read-out hidden states ``h`` [K, R, d].

    Log-probs as ``logit − logsumexp``, read only where needed (the target tokens, the KL rows),
    from :func:`_readout`'s vocabulary slices: no [K, R, V] logits or log-softmax copy — the
    largest transients of a big vocabulary.
    """
    lse, target, argmax, kl_logits = _readout(head, h, label, max_elems, w_low)
    K = h.shape[0]
    is_t = label >= 0
    lp_t = (target - lse)[:, is_t]
    rows_t = st_row[is_t]
    nll = torch.zeros(K, n_rewrite, dtype=lp_t.dtype, device=lp_t.device).index_add_(1, rows_t, -lp_t)
    nll = (nll / target_len).mean(-1)
    hit = (argmax[:, is_t] == label[is_t]).to(lp_t.dtype)
    correct = torch.zeros(K, n_rewrite, dtype=lp_t.dtype, device=lp_t.device).index_add_(1, rows_t, hit)
    kl = kl_rows(kl_ref, kl_logits - lse[:, ~is_t].unsqueeze(-1)).mean(-1)
    return nll + cfg.kl_factor * kl + wd_term, correct


class PrefixGraph(torch.nn.Module):
    """Layers > l, final norm and LM head of ``model`` over a fixed :class:`PrefixState`.

    The modules are shared with ``model`` (or with a quantized copy of it); nothing is cloned.
    """

    def __init__(self, model, family: Family, state: PrefixState, cfg: ObjectiveConfig,
                 max_logit_elems: int = 1 << 20, max_act_elems: int = 1 << 21) -> None:
        super().__init__()
        self.max_logit_elems = max_logit_elems
        L = n_layers(model, family)
        self.blocks = torch.nn.ModuleList(get_module(model, family.layer, i) for i in range(state.layer + 1, L))
        self.block_idx = list(range(state.layer + 1, L))
        self.norm = get_module(model, family.final_norm)
        self.head = get_module(model, family.lm_head)
        self.w_low = low_head(self.head)  # quant.head_matmul "bf16": the read-out's differences in bf16
        # the edit layer's MLP-output norm (Gemma-3), or None: the delta joins the residual as is
        self.post_norm = get_module(model, family.mlp_post_norm, state.layer) \
            if family.mlp_post_norm is not None else None
        self.state = state
        self.cfg = cfg
        self.v_init_norm = float(state.v_init.norm())
        B, S, _ = state.shape
        self.n_rows, self.n_rewrite, self.target_len = B, state.n_rewrite, state.target_len  # driver.EditGraph
        # deltas per pass through the blocks, so that the widest activation (the MLP's hidden
        # layer, [k·B·S, d_ff]) stays within max_act_elems: same arithmetic, bounded transients
        self.k_chunk = max(1, max_act_elems // (B * S * _widest(self.blocks, state.h_suffix.shape[-1])))

    @torch.inference_mode()
    def forward(self, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        chunks = range(0, deltas.shape[0], self.k_chunk)
        if self.w_low is not None:  # one read-out for all K: the mean's fp32 logits once per call
            h = torch.cat([self._hidden(deltas[i:i + self.k_chunk]) for i in chunks])
            return self._loss(deltas, h, self.w_low)
        parts = [self._chunk(deltas[i:i + self.k_chunk]) for i in chunks]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def differentiable(self, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`forward`'s arithmetic with autograd allowed (the backprop baseline on the same
        graph, ``rome-lean``): gradients reach ``deltas`` only if it requires them. The read-out
        is fp32 throughout (a bf16 ``head_matmul`` is the forward-only loop's)."""
        return self._chunk(deltas)

    def _chunk(self, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return self._loss(deltas, self._hidden(deltas), None)

    def _hidden(self, deltas: torch.Tensor) -> torch.Tensor:
        """The final-normed hidden states at the read-outs [K, R, d], ``deltas`` [K, d] added at layer l."""
        st = self.state
        K = deltas.shape[0]
        B, S, P = st.shape
        d = st.h_suffix.shape[-1]
        x = st.h_suffix.unsqueeze(0).expand(K, B, S, d).clone()
        add = deltas.to(x.dtype).unsqueeze(1)  # [K, 1, d]: the delta at layer l's MLP output
        if st.row_gain is not None:
            add = add * st.row_gain.to(x.dtype).view(1, B, 1)
        if self.post_norm is not None:  # the residual's change: norm(v_b + δ) − norm(v_b)
            add = self.post_norm(st.mlp_rows.unsqueeze(0) + add) - st.mlp_normed.unsqueeze(0)
        x[:, :, 0, :] += add
        x = x.reshape(K * B, S, d)
        mask = st.mask.repeat(K, 1, 1, 1)
        pe = {t: (c.repeat(K, 1, 1), s_.repeat(K, 1, 1)) for t, (c, s_) in st.pe.items()}
        cache = RecordingKV({i: (st.prefix_k[n].repeat(K, 1, 1, 1), st.prefix_v[n].repeat(K, 1, 1, 1))
                             for n, i in enumerate(self.block_idx)}, record=False)
        for blk, kind in zip(self.blocks, st.block_types):
            x = blk(x, attention_mask=mask, position_embeddings=pe.get(kind), past_key_values=cache)
        flat = st.readout_row * S + st.readout_pos
        return self.norm(x.view(K, B * S, d)[:, flat])

    def _loss(self, deltas: torch.Tensor, h: torch.Tensor, w_low: torch.Tensor | None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        st = self.state
        wd = decay_term(deltas.float().norm(dim=-1), self.v_init_norm, self.cfg)
        # the LM head by vocabulary slices of at most max_logit_elems logits
        return _readout_loss(self.head, h, st.readout_row, st.readout_label, st.n_rewrite, st.target_len,
                             st.kl_ref, wd, self.cfg, self.max_logit_elems, w_low)


def _widest(blocks: torch.nn.ModuleList, d: int) -> int:
    """The widest output of any linear layer in ``blocks`` (the MLP's hidden size), at least ``d``."""
    widths = [m.weight.shape[0] for b in blocks for m in b.modules() if isinstance(m, torch.nn.Linear)]
    return max([d, *widths])


class FullGraph(torch.nn.Module):
    """The same objective by full forwards of the whole model (no reuse); the reference."""

    def __init__(self, model, family: Family, layer: int, inputs: EditInputs, state: PrefixState,
                 cfg: ObjectiveConfig) -> None:
        super().__init__()
        self.model, self.inputs, self.state, self.cfg = model, inputs, state, cfg
        self.mod = get_module(model, family.mlp_out, layer)
        self.v_init_norm = float(state.v_init.norm())
        self.n_rows = inputs.batch.input_ids.shape[0]  # driver.EditGraph
        self.n_rewrite, self.target_len = inputs.n_rewrite, inputs.target_len

    @torch.inference_mode()
    def forward(self, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """All K·B rows in one batched forward; replica k gets ``deltas[k]`` at its subject."""
        b = self.inputs.batch.to(self.state.h_suffix.device)
        K, B = deltas.shape[0], b.input_ids.shape[0]
        per_row = deltas.repeat_interleave(B, dim=0)
        if self.state.row_gain is not None:
            per_row = per_row * self.state.row_gain.to(per_row).repeat(K).unsqueeze(-1)
        with rewrite_output(self.mod, add_at_positions(per_row, b.subject_idx.repeat(K))):
            logits = self.model(input_ids=b.input_ids.repeat(K, 1),
                                attention_mask=b.attention_mask.repeat(K, 1)).logits
        logits = logits.view(K, B, *logits.shape[1:])
        nll_rows = nll_per_prompt(logits, self.inputs)
        kl = kl_rows(self.state.kl_ref, kl_logprobs(logits, self.inputs)).mean(-1)
        wd = decay_term(deltas.float().norm(dim=-1), self.v_init_norm, self.cfg)
        n = self.inputs.n_rewrite
        lab = b.labels[:n]
        hit = ((logits[:, :n].argmax(-1) == lab) & (lab != -100)).float().sum(-1)  # counts per row
        return nll_rows.mean(-1) + self.cfg.kl_factor * kl + wd, hit
