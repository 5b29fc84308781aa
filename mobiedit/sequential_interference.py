"""Interference between sequential edits (issue 16, item 5): for each edit, the size of its update,
how close its key is to the earlier edits' keys, and how much it moves what the earlier edits wrote.

An edit writes ``ΔW = u wᵀ`` (``u`` in the module's output space, ``w`` in its input space, the
space of the key ``k̄``), so ``ΔW k = u (wᵀk)``. For edit ``i`` and every earlier *applied* edit
``j``:

* ``update_norm`` = ``‖ΔW_i‖_F = ‖u_i‖·‖w_i‖``;
* ``key_overlap_max`` = ``max_j |cos(k̄_i, k̄_j)|``;
* ``moves_earlier_mean`` / ``moves_earlier_max`` = mean / max over ``j`` of
  ``‖ΔW_i k̄_j‖ / ‖ΔW_j k̄_j‖`` — how far edit ``i`` shifts the output at edit ``j``'s key,
  relative to the change edit ``j`` itself wrote there (1.0: as large as edit ``j``'s own change).

The first applied edit has no earlier ones: its overlap and moves are ``None``. An edit that is
not applied gets the same fields for the update it would have written (against the applied edits
before it); it never becomes an "earlier edit", and the window summaries leave it out. All
arithmetic is float64 on copies; nothing here touches a model.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

#: the per-edit fields summarised per checkpoint window (median and max over the applied edits)
SUMMARISED = ("update_norm", "key_overlap_max", "moves_earlier_max")


def _vec(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a detached float64 CPU vector."""
    return t.detach().reshape(-1).to(device="cpu", dtype=torch.float64)


@dataclass
class InterferenceTracker:
    """The applied edits so far: their ``w`` rows, keys and the size of their own written change at
    their key (``‖ΔW_j k̄_j‖``). :meth:`measure` scores a new edit against them; :meth:`add`
    records an applied one."""

    w_rows: list[torch.Tensor] = field(default_factory=list)
    keys: list[torch.Tensor] = field(default_factory=list)
    own_change: list[float] = field(default_factory=list)

    def measure(self, u: torch.Tensor, w: torch.Tensor, key: torch.Tensor | None) -> dict:
        """The interference fields of the update ``u wᵀ`` with key ``key`` (module docstring);
        overlap and moves are None without earlier edits or without a key."""
        u64, w64 = _vec(u), _vec(w)
        out: dict = {"update_norm": float(u64.norm() * w64.norm()), "key_overlap_max": None,
                     "moves_earlier_mean": None, "moves_earlier_max": None}
        if key is None or not self.keys:
            return out
        K = torch.stack(self.keys)  # [j, d_in]
        k = _vec(key)
        cos = (K @ k).abs() / (K.norm(dim=1) * k.norm()).clamp_min(1e-300)
        out["key_overlap_max"] = float(cos.max())
        shifted = u64.norm() * (K @ w64).abs()  # ‖ΔW_i k̄_j‖ for every earlier j
        own = torch.tensor(self.own_change, dtype=torch.float64)
        ratio = shifted[own > 0] / own[own > 0]
        if ratio.numel():
            out["moves_earlier_mean"] = float(ratio.mean())
            out["moves_earlier_max"] = float(ratio.max())
        return out

    def add(self, u: torch.Tensor, w: torch.Tensor, key: torch.Tensor | None) -> None:
        """Record an applied edit (an edit without a key is not tracked: nothing to compare)."""
        if key is None:
            return
        u64, w64, k = _vec(u), _vec(w), _vec(key)
        self.w_rows.append(w64)
        self.keys.append(k)
        self.own_change.append(float(u64.norm() * (w64 @ k).abs()))


#: the search statuses of a search that ran out of its budget (steps or evaluations) before its rule passed
OUT_OF_BUDGET = ("MAX_STEPS", "BUDGET")


def window_summary(records: list[dict], first: int, last: int) -> dict:
    """Median and max of :data:`SUMMARISED` over the applied edits numbered ``first..last``
    (1-based, inclusive; None when no applied edit has the field), with the window, its applied
    count, the median loss evaluations and the mean wall seconds per edit of all its edits, and how
    many of its edits' last searches ran out of their step or evaluation budget (``at_budget``) or
    stopped at a loss plateau (``at_plateau``, ``zo.patience``) rather than on success."""
    window = [r for r in records if first <= r["edit"] <= last]
    applied = [r for r in window if r["applied"]]
    out: dict = {"first": first, "last": last, "edits": len(window), "applied": len(applied)}
    for name in SUMMARISED:
        vals = [r[name] for r in applied if r.get(name) is not None]
        out[f"{name}_median"] = statistics.median(vals) if vals else None
        out[f"{name}_max"] = max(vals) if vals else None
    out["loss_evals_median"] = statistics.median(r["loss_evals"] for r in window) if window else None
    out["wall_s_mean"] = statistics.mean(r["wall_s"] for r in window) if window else None
    out["at_budget"] = sum(r.get("status") in OUT_OF_BUDGET for r in window)
    out["at_plateau"] = sum(r.get("status") == "PLATEAU" for r in window)
    return out
