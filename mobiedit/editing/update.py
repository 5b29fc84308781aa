"""The rank-one update of ROME: ΔW = u wᵀ with u = v* − W k_cur and w = C⁻¹k̄ / (k_cur · C⁻¹k̄),
the null-space variant of it, the direction that is exact at every context template's key (``rows``), the batch solve that meets N such edits at once, and the one write of an update into a weight (:func:`apply_factors`,
used by the session, the journal's replay/undo/bake, verify-after-write and the demo)."""
from __future__ import annotations

import torch

from ..errors import ConfigError, JournalError, NumericalError


def solve_c(c: torch.Tensor | None, k_bar: torch.Tensor, ridge: float) -> torch.Tensor:
    """C⁻¹ k̄ (with a relative ridge ``ridge·mean(diag C)``); k̄ itself when ``c`` is None. ``k_bar``
    may be a matrix [d, n]: C⁻¹ of each column."""
    if c is None:
        return k_bar.clone()
    c64 = c.double()
    lam = ridge * torch.diagonal(c64).mean()
    try:
        x = torch.linalg.solve(c64 + lam * torch.eye(c64.shape[0], dtype=c64.dtype, device=c64.device),
                               k_bar.double())
    except torch.linalg.LinAlgError as e:  # e.g. all-zero statistics: the relative ridge is 0 too
        raise NumericalError(f"key statistics are singular ({' '.join(str(e).split())})", where="key statistics",
                             fix="recompute the statistics on a larger corpus, or raise mom2_ridge") from None
    return x.float()


def rows_direction(c: torch.Tensor | None, keys: torch.Tensor, mom2_ridge: float, rows_ridge: float) -> torch.Tensor:
    """The ``rows`` rule's direction: ``w`` [d] with ``wᵀk_i ≈ 1`` at each of ``keys`` [n, d] and the
    least ``wᵀCw`` — ``C⁻¹K (KᵀC⁻¹K + ρ I)⁻¹ 1``, ``ρ = rows_ridge · mean(diag KᵀC⁻¹K)`` (the keys of
    one subject in several contexts are close to collinear; ρ → ∞ gives a multiple of ROME's
    ``C⁻¹k̄``). Float64 inside, float32 out; NumericalError on a non-finite result."""
    k = keys.double().reshape(keys.shape[0], -1)
    return rows_combine(solve_c(c, k.T.contiguous(), mom2_ridge), k, rows_ridge)


def rows_combine(ck: torch.Tensor, keys: torch.Tensor, rows_ridge: float) -> torch.Tensor:
    """The ``rows`` direction from ``ck`` = C⁻¹Kᵀ [d, n] (each key through the inverse statistics)
    and ``keys`` [n, d]: ``ck (K·ck + ρ I)⁻¹ 1``. The one definition of the rule's combination: the
    eager path (:func:`rows_direction`, C⁻¹ by a solve) and the bundle path (:func:`bundle_direction`,
    the shipped C⁻¹) call it; the app's ``KeyStats.rowsDirection`` is its Java transcription."""
    ck = ck.double()
    gram = keys.double().reshape(keys.shape[0], -1) @ ck
    rho = rows_ridge * torch.diagonal(gram).mean()
    a = torch.linalg.solve(gram + rho * torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device),
                           torch.ones(gram.shape[0], dtype=gram.dtype, device=gram.device))
    d = ck @ a
    if not bool(torch.isfinite(d).all()):
        raise NumericalError("non-finite direction from the template keys", where="update.rule rows",
                             fix="raise update.rows_ridge, or use rule 'rome'")
    return d.float()


#: the write rules a bundle can ship (manifest ``edit.update.rule``); ``protect`` and ``rows-protect``
#: hold the applied edits' keys still — a bundle's journal keeps each edit's key (factors file, "k")
BUNDLE_UPDATE_RULES = ("rome", "rows", "protect", "rows-protect")
#: the bundle rules whose solve takes the applied edits' keys
PROTECTING_RULES = ("protect", "rows-protect")


def protected_solve(c_inv: torch.Tensor, prior_keys: torch.Tensor | None, weight: float,
                    x: torch.Tensor) -> torch.Tensor:
    """``(C + weight · K_pᵀK_p)⁻¹ x`` from the shipped ``c_inv`` = C⁻¹ [d, d], the applied edits' keys
    ``prior_keys`` [n_p, d] and ``x`` [d] or [d, n], by the Woodbury identity (a bundle ships C⁻¹,
    not C): ``C⁻¹x − A (I/weight + K_p A)⁻¹ Aᵀx`` with ``A = C⁻¹K_pᵀ``, float64 inside — one
    n_p × n_p solve, where :func:`protected_moment` + :func:`solve_c` (the eager path) solve d × d.
    ``prior_keys`` None or empty: ``C⁻¹x``. Returns float64."""
    ci, x64 = c_inv.double(), x.double()
    if prior_keys is None or prior_keys.numel() == 0:
        return ci @ x64
    kp = prior_keys.double().reshape(prior_keys.shape[0], -1)
    a = ci @ kp.T
    s = kp @ a + torch.eye(kp.shape[0], dtype=torch.float64) / weight
    return ci @ x64 - a @ torch.linalg.solve(s, a.T @ x64)


def bundle_direction(c_inv: torch.Tensor, rewrite_keys: torch.Tensor, rule: str = "rome",
                     rows_ridge: float = 1e-2, prior_keys: torch.Tensor | None = None,
                     edited_weight: float = 1.0) -> torch.Tensor:
    """The update direction of a bundle edit from the shipped ``c_inv`` [d, d] and the prefix
    program's rewrite-row keys [n, d] (row 0 the plain prompt): ``rome`` — ``C⁻¹k̄``; ``rows`` —
    :func:`rows_combine` of ``C⁻¹Kᵀ``; ``protect`` / ``rows-protect`` — the same with
    ``C + edited_weight · K_pᵀK_p`` for ``C`` (:func:`protected_solve`; ``prior_keys`` [n_p, d] the
    active journal edits' keys, the eager rules' ``ctx.edited_keys``). ``rank_one_factors``
    normalises it at the plain key."""
    if rule not in BUNDLE_UPDATE_RULES:
        raise ConfigError(f"unknown update rule {str(rule)[:40]!r}", where="edit.update.rule",
                          fix=f"use one of {', '.join(BUNDLE_UPDATE_RULES)}")
    prior = prior_keys if rule in PROTECTING_RULES and prior_keys is not None and prior_keys.numel() else None
    if rule in ("rows", "rows-protect"):
        return rows_combine(protected_solve(c_inv, prior, edited_weight, rewrite_keys.double().T), rewrite_keys,
                            rows_ridge)
    if prior is None:  # ROME's direction, bit for bit as bundles always wrote it (float32)
        return c_inv @ rewrite_keys.mean(0)
    return protected_solve(c_inv, prior, edited_weight, rewrite_keys.mean(0)).float()


def protected_moment(c: torch.Tensor | None, keys: list[torch.Tensor], weight: float) -> torch.Tensor | None:
    """``C + weight · Σ k kᵀ`` over ``keys`` (the edits already applied) in float64: the normal
    matrix of the ``protect`` rule. ``c`` None (no statistics): the identity stands for it."""
    if not keys:
        return c
    k = torch.stack([x.double().reshape(-1) for x in keys])
    base = c.double() if c is not None else torch.eye(k.shape[1], dtype=torch.float64)
    return base + weight * (k.T @ k).to(base.device)


def null_space_projector(c: torch.Tensor, threshold: float) -> torch.Tensor:
    """AlphaEdit's ``P = Û Ûᵀ``: Û the eigenvectors of the key second moment ``c`` whose eigenvalues
    are at most ``threshold`` × the largest — the key directions natural text barely excites.
    Returns ``P`` [d, d] (float32); at least one direction (the smallest) is always kept."""
    lam, vecs = torch.linalg.eigh(c.double())
    keep = lam <= threshold * lam.max()
    if not bool(keep.any()):
        keep[0] = True
    u = vecs[:, keep]
    return (u @ u.T).float()


def null_space_direction(p: torch.Tensor, k_bar: torch.Tensor, prior_keys: list[torch.Tensor],
                         alpha: float) -> torch.Tensor:
    """AlphaEdit's solve for one key (unnormalised ``w``): ``(P (k̄k̄ᵀ + K_p K_pᵀ) + α I)⁻¹ P k̄`` with
    ``α = alpha · ‖P k̄‖²``; ``prior_keys`` are the keys of the edits already applied (AlphaEdit's
    ``cache_c``). Raises NumericalError when ``k̄`` has no component in the projected space."""
    p64, k64 = p.double(), k_bar.double()
    pk = p64 @ k64
    scale = float(pk @ pk)
    if not scale > 1e-8 * float(k64 @ k64):  # float32 keys: below this P k̄ is rounding noise
        raise NumericalError("the subject's key has no component outside the protected key space",
                             where="update.rule nullspace", fix="raise update.nullspace_threshold, or use rule 'rome'")
    gram = torch.outer(k64, k64)
    for kp in prior_keys:
        kp64 = kp.double().to(k64)
        gram += torch.outer(kp64, kp64)
    m = p64 @ gram + alpha * scale * torch.eye(p64.shape[0], dtype=p64.dtype, device=p64.device)
    return torch.linalg.solve(m, pk).float()


def rank_one_factors(k_cur: torch.Tensor, out_cur: torch.Tensor, v_star: torch.Tensor,
                     c_inv_k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(u [d_out], w [d_in]) such that (W + u wᵀ) k_cur = v* − bias-free part, i.e. the new
    output at k_cur is exactly v*.

    Raises NumericalError on non-finite inputs or a vanishing denominator.
    """
    denom = torch.dot(k_cur.double(), c_inv_k.double())
    u = (v_star.double() - out_cur.double())
    if not (torch.isfinite(u).all() and torch.isfinite(c_inv_k).all() and torch.isfinite(denom)) or denom.abs() < 1e-12:
        raise NumericalError("non-finite or degenerate rank-one factors", where="rank-one update",
                             fix="check the key statistics and the value search")
    return u.float(), (c_inv_k.double() / denom).float()


def batch_factors(k_cur: torch.Tensor, w: torch.Tensor, deltas: torch.Tensor, max_cond: float = 1e8) -> torch.Tensor:
    """The ``u`` rows of one batch solve (MEMIT/AlphaEdit form, exact at every key): N edits with
    plain-prompt keys ``k_cur`` [N, d_in], ROME directions ``w`` [N, d_in] (each request's own
    ``w``, any scale) and value changes ``deltas`` [N, d_out] get ``ΔW = Σ_j u_j w_jᵀ`` with
    ``ΔW k_cur_i = δ_i`` for every i: ``U = G⁻¹ Δ``, ``G_ij = k_cur_i · w_j``. With one edit (or
    keys each direction ignores) ``G = I`` and ``U = Δ``: N separate ROME edits. Returns U [N, d_out]
    float32; the update stays a sum of rank-one terms (journal entries, bundle slots).

    Raises NumericalError when ``G`` is singular or worse conditioned than ``max_cond`` (two
    requests of the batch share a key — the same subject — and cannot both be met)."""
    g = k_cur.double() @ w.double().T
    cond = float(torch.linalg.cond(g))
    if not cond < max_cond:
        raise NumericalError(f"the batch's key system is singular (condition number {cond:.3g}): two of its "
                             "requests share a key", where="batch",
                             fix="put requests about the same subject in different batches (or edit them one by one)")
    return torch.linalg.solve(g, deltas.double()).float()


def apply_factors(weight: torch.Tensor, u: torch.Tensor, w: torch.Tensor,
                  weight_out_in: bool) -> torch.Tensor:
    """``weight + u w^T`` (``[out, in]``) or ``weight + w u^T`` (``[in, out]``), as a new tensor.

    Computed in float32 (factors cast to float32) and cast back to ``weight.dtype``; elementwise
    ops only, so the same inputs always give the same bits. Raises JournalError if the factors do
    not fit the weight and NumericalError if a finite weight would become non-finite (overflow).
    """
    u32 = u.detach().to(device=weight.device, dtype=torch.float32).reshape(-1)
    w32 = w.detach().to(device=weight.device, dtype=torch.float32).reshape(-1)
    delta = torch.outer(u32, w32) if weight_out_in else torch.outer(w32, u32)
    if delta.shape != weight.shape:
        layout = "[out, in]" if weight_out_in else "[in, out]"
        raise JournalError(f"factors u[{u32.numel()}], w[{w32.numel()}] do not fit a {layout} weight "
                           f"of shape {list(weight.shape)}", where="apply_factors",
                           fix="u has the module's output size, w its input size")
    out = (weight.detach().to(torch.float32) + delta).to(weight.dtype)
    if not torch.isfinite(out).all() and torch.isfinite(weight).all():
        raise NumericalError("the update makes the weight non-finite (overflow)", where="apply_factors",
                             fix=f"the factors are too large for a {weight.dtype} weight; nothing was changed")
    return out


def write_factors(weight: torch.Tensor, u: torch.Tensor, w: torch.Tensor, weight_out_in: bool) -> None:
    """Write ``u wᵀ`` into ``weight`` in place with :func:`apply_factors`' arithmetic (bit-identical to a
    journal replay); ``weight`` is unchanged if that raises."""
    new = apply_factors(weight, u, w, weight_out_in)
    with torch.no_grad():
        weight.copy_(new)
