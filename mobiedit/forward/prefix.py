"""Prefix-activation reuse: everything about one edit that no value delta can change.

The delta is added to layer ``l``'s MLP output at the subject's last token ``s_b`` of each prompt
row ``b`` (where the family normalises that output before the residual add — Gemma-3's
``post_feedforward_layernorm``, :attr:`~mobiedit.families.Family.mlp_post_norm` — the residual
changes by ``norm(v_b + δ) − norm(v_b)``, so the state keeps each row's ``v_b``). Hence, exactly:
  * every layer ≤ ``l`` at every position is delta-independent (layer ``l``'s MLP output at
    ``s_b`` changes only by the additive delta itself, which the graph adds);
  * at layers > ``l``, keys/values of positions ``< s_b`` are delta-independent (causality).
:func:`compute_prefix_state` runs the unedited model once and keeps: the residual stream entering
layer ``l+1`` at the suffix positions ``s_b … s_b+S-1``, the K/V of layers > ``l`` at positions
``< P = max_b s_b``, the rotary tables of the suffix positions, the attention mask, and the
read-out positions of the loss. Each step then runs only layers > ``l`` on ``S`` tokens per row.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from ..families import Family, check_window, get_module, layer_types, n_layers, rotary_tables
from ..editing.context import EditInputs


@dataclass
class PrefixState:
    """Per-edit constants of the forward-only graph (all tensors on one device).

    Shapes: B rows, S suffix length, P prefix length, d hidden, Lr remaining layers, R read-outs.
      h_suffix [B, S, d]; prefix_k / prefix_v: list of Lr tensors [B, Hkv, P, hd];
      mask [B, 1, S, P+S] (bool, True = may attend); pe: RoPE (cos, sin) [B, S, hd] of the suffix
      positions per layer type (``{None: ...}`` for single-type families, {} without rotary);
      block_types: the layer type of each remaining layer;
      readout_row [R], readout_pos [R] (suffix coordinates); readout_label [R] (-1 for KL rows);
      kl_ref [n_kl, V] (log-probs of the unedited model at the KL read-outs);
      row_gain [B] or None: the delta's gain per row (UpdateConfig.written_gain);
      mlp_rows, mlp_normed [B, d] or None: where the family normalises the MLP output
      (``Family.mlp_post_norm``), each row's MLP output at ``s_b`` and its normed value (the
      residual's share of it), so the delta goes through the norm as the written weight's does.
    """

    layer: int
    h_suffix: torch.Tensor
    prefix_k: list[torch.Tensor]
    prefix_v: list[torch.Tensor]
    mask: torch.Tensor
    pe: dict
    block_types: list
    readout_row: torch.Tensor
    readout_pos: torch.Tensor
    readout_label: torch.Tensor
    kl_ref: torch.Tensor
    n_rewrite: int
    target_len: int
    v_init: torch.Tensor
    row_gain: torch.Tensor | None = None  # [B]: row b gets gain[b]·δ (None: δ at every row)
    mlp_rows: torch.Tensor | None = None    # [B, d]: v_b, only where the family has mlp_post_norm
    mlp_normed: torch.Tensor | None = None  # [B, d]: norm(v_b), the same rows

    @property
    def cos(self) -> torch.Tensor | None:
        """The single-type RoPE cos table (what a bundle's edit program takes), or None."""
        return self._single_pe()[0]

    @property
    def sin(self) -> torch.Tensor | None:
        return self._single_pe()[1]

    def _single_pe(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        if not self.pe:
            return None, None
        if len(self.pe) > 1:
            raise NotImplementedError("several RoPE tables (per layer type): take state.pe[type]")
        return next(iter(self.pe.values()))

    @property
    def shape(self) -> tuple[int, int, int]:
        """(B, S, P)."""
        B, S, _ = self.h_suffix.shape
        return B, S, self.mask.shape[-1] - S


def suffix_geometry(inputs: EditInputs) -> tuple[torch.Tensor, torch.Tensor, int, int]:
    """(s [B], last [B], S, P): subject-last and last-token indices, suffix and prefix lengths."""
    s = inputs.batch.subject_idx.clone()
    last = inputs.batch.last_idx.clone()
    return s, last, int((last - s).max()) + 1, int(s.max())


def build_mask(s: torch.Tensor, last: torch.Tensor, S: int, P: int) -> torch.Tensor:
    """Attention mask [B, 1, S, P+S] of the suffix queries over (prefix keys, suffix keys).

    Prefix key p is visible iff p < s_b; suffix key j' iff j' ≤ j and s_b + j' ≤ last_b. Query rows
    past the row's end (padding) see prefix key 0 only, so no row is empty (their output is unused).
    """
    B = s.shape[0]
    p = torch.arange(P).view(1, 1, P)
    pre = (p < s.view(B, 1, 1)).expand(B, S, P)
    j = torch.arange(S)
    suf = (j.view(1, 1, S) <= j.view(1, S, 1)) & ((s.view(B, 1, 1) + j.view(1, 1, S)) <= last.view(B, 1, 1))
    m = torch.cat([pre, suf.expand(B, S, S)], dim=-1)
    dead = (s.view(B, 1) + j.view(1, S)) > last.view(B, 1)
    m[dead] = False
    m[..., 0] |= dead
    return m.unsqueeze(1)


def readouts(inputs: EditInputs, s: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(row, pos, label) of every position the loss reads: target positions of rewrite rows
    (label = target token) and the last position of KL rows (label = -1)."""
    b = inputs.batch
    rows, pos, lab = [], [], []
    for r in range(inputs.n_rewrite):
        for t in (b.labels[r] != -100).nonzero().flatten().tolist():
            rows.append(r); pos.append(t - int(s[r])); lab.append(int(b.labels[r, t]))
    for r in range(inputs.n_rewrite, b.input_ids.shape[0]):
        rows.append(r); pos.append(int(b.last_idx[r] - s[r])); lab.append(-1)
    return torch.tensor(rows), torch.tensor(pos), torch.tensor(lab)


def compute_prefix_state(model, family: Family, layer: int, inputs: EditInputs,
                         row_gain: torch.Tensor | None = None) -> PrefixState:
    """One unedited forward → the :class:`PrefixState` of this edit at ``layer``; ``row_gain`` [B]:
    the delta's gain per row (``UpdateConfig.written_gain``; None: δ at every row)."""
    from ..editing.objective import kl_keep, kl_logprobs

    dev = next(model.parameters()).device
    b = inputs.batch.to(dev)
    check_window(model, family, int(b.input_ids.shape[1]))
    s, last, S, P = suffix_geometry(inputs)
    from ..hooks import record

    with torch.no_grad(), record(get_module(model, family.layer, layer), inputs=False) as hl, \
            record(get_module(model, family.mlp_out, layer), inputs=False) as hm:
        out = model(input_ids=b.input_ids, attention_mask=b.attention_mask, use_cache=True,
                    logits_to_keep=kl_keep(inputs).to(dev))  # logits at the KL read-outs only
    B = b.input_ids.shape[0]
    j = torch.arange(S)
    pos = (s.view(B, 1) + j.view(1, S)).clamp(max=b.input_ids.shape[1] - 1).to(dev)
    h_suffix = hl.output[torch.arange(B, device=dev).view(B, 1), pos]  # output of layer l
    L = n_layers(model, family)
    cache = out.past_key_values
    pk = [cache.layers[i].keys[:, :, :P].contiguous() for i in range(layer + 1, L)]
    pv = [cache.layers[i].values[:, :, :P].contiguous() for i in range(layer + 1, L)]
    with torch.no_grad():
        pe = rotary_tables(model, family, h_suffix, pos)
    v_init = hm.output[0, int(s[0])].float().clone()
    mlp_rows = mlp_normed = None
    if family.mlp_post_norm is not None:
        mlp_rows = hm.output[torch.arange(B, device=dev), s.to(dev)].clone()
        with torch.no_grad():
            mlp_normed = get_module(model, family.mlp_post_norm, layer)(mlp_rows)
    rr, rp, rl = readouts(inputs, s)
    return PrefixState(layer=layer, h_suffix=h_suffix, prefix_k=pk, prefix_v=pv,
                       mask=build_mask(s, last, S, P).to(dev), pe=pe,
                       block_types=layer_types(model, family)[layer + 1:],
                       readout_row=rr.to(dev), readout_pos=rp.to(dev), readout_label=rl.to(dev),
                       kl_ref=kl_logprobs(out.logits, inputs, kept=True).detach(), n_rewrite=inputs.n_rewrite,
                       target_len=inputs.target_len, v_init=v_init,
                       row_gain=None if row_gain is None else row_gain.to(dev), mlp_rows=mlp_rows,
                       mlp_normed=mlp_normed)
