"""The bundle's own verdicts on edits, through its programs (no eager model).

* :class:`EditGraph`: the ``edit`` program over one edit's state, any number of deltas.
* :func:`written_holds`: verify after write — a new edit's factors in the first free slot, the
  ``prefix`` program rerun, the ``edit`` program at δ = 0 judged by the success rule.
* :func:`says_now` / :func:`lost_edits`: whether the bundle, with its active edits in the slots,
  still says an earlier edit's new fact (the same rule, δ = 0) — what ``edit --bundle --repair``
  rechecks after each new edit.

The rule is the success rule without the search's loss margin (:func:`says_rule`):
:func:`mobiedit.editing.objective.edit_holds` over the rewrite rows (the plain prompt fully
correct, at least ``success_fraction`` of the rows fully correct).
"""
from __future__ import annotations

from typing import Callable

import numpy as np
import torch

from mobiedit.editing.config import ObjectiveConfig
from mobiedit.editing.context import build_edit_inputs
from mobiedit.editing.objective import edit_holds, full_rows
from mobiedit.journal import Journal, JournalEntry
from mobiedit.requests import EditRequest

from .bundle import Bundle
from .config import EditShapes
from .packing import edit_feed, pack_edit

Holds = Callable[[torch.Tensor], bool]


class EditGraph:
    """The bundle's edit program over one edit's state (a :class:`mobiedit.driver.EditGraph`): any
    number of deltas, batched by K (the last batch zero-padded). Returns (losses [n], correct
    [n, n_rewrite]): per rewrite row, the count of argmax targets."""

    def __init__(self, program, feed: dict[str, torch.Tensor], K: int, packed) -> None:
        self.program, self.feed, self.K = program, feed, K
        self.n_rows, self.n_rewrite, self.target_len = packed.n_rows, packed.n_rewrite, packed.target_len

    def __call__(self, deltas: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        n = deltas.shape[0]
        losses, correct = [], []
        for i in range(0, n, self.K):
            part = deltas[i:i + self.K]
            pad = torch.zeros(self.K, deltas.shape[1])
            pad[:part.shape[0]] = part
            out = self.program.run({**self.feed, "deltas": pad})
            losses.append(out["losses"][:part.shape[0]])
            correct.append(out["correct"][:part.shape[0], :self.n_rewrite])
        return torch.cat(losses), torch.cat(correct)


def edit_shapes_of(m: dict) -> EditShapes:
    """The :class:`EditShapes` a bundle's programs were exported for (from its manifest)."""
    s = m["shapes"]
    return EditShapes(K=s["edit_K"], rows=s["edit_rows"], suffix=s["edit_suffix"], prefix=s["edit_prefix"],
                      targets=s["edit_targets"], kl=s["edit_kl"])


def says_rule(packed, success_fraction: float) -> Holds:
    """The written edit's verdict on the edit program's ``correct`` [1, n_rewrite]: the success
    rule without the search's loss margin."""
    def says(c: torch.Tensor) -> bool:
        return edit_holds(full_rows(c[0, : packed.n_rewrite], packed.target_len), success_fraction)
    return says


def holds_at_zero(b: Bundle, packed, slot_u: torch.Tensor, slot_w: torch.Tensor, holds: Holds) -> bool:
    """``holds(correct)`` of the edit program at δ = 0 after the prefix program ran with these slots."""
    pout = b.program("prefix").run({**packed.prefix_feed, "slot_u": slot_u, "slot_w": slot_w})
    graph = EditGraph(b.program("edit"), edit_feed(packed, pout), b.manifest["shapes"]["edit_K"], packed)
    _, c = graph(torch.zeros(1, pout["values"].shape[-1]))
    return holds(c)


def written_holds(b: Bundle, packed, slot_u: torch.Tensor, slot_w: torch.Tensor, u: np.ndarray, w: np.ndarray,
                  holds: Holds) -> bool | None:
    """Verify after write on the bundle's own programs: the new factors in the first free slot,
    the prefix program rerun, the edit program at delta 0 judged by ``holds(correct)``.
    None when every slot is taken (the edit cannot be written anyway)."""
    empty = slot_u.abs().sum(1) == 0
    if not empty.any():
        return None
    free = int(empty.nonzero()[0])
    su, sw = slot_u.clone(), slot_w.clone()
    su[free], sw[free] = torch.from_numpy(u), torch.from_numpy(w)
    return holds_at_zero(b, packed, su, sw, holds)


def says_now(b: Bundle, req: EditRequest, slots: tuple[torch.Tensor, torch.Tensor], success_fraction: float) -> bool:
    """Whether the bundle with ``slots`` in its rank-one slots says ``req``'s new fact (the rule
    of :func:`says_rule`, on the manifest's templates and objective)."""
    m = b.manifest
    objective = ObjectiveConfig(**m["edit"]["objective"])
    packed = pack_edit(build_edit_inputs(b.tokenizer(), req, m["edit"]["templates"], objective),
                       edit_shapes_of(m), objective)
    return holds_at_zero(b, packed, slots[0], slots[1], says_rule(packed, success_fraction))


def lost_edits(b: Bundle, journal: Journal, success_fraction: float, skip: set[int] = frozenset()
               ) -> list[JournalEntry]:
    """Active edits (ids not in ``skip``) whose new fact the bundle no longer says with every
    active edit in the slots, in id order. Entries recorded from a free-form request are skipped."""
    slots = b.slots(journal)
    lost = []
    for e in journal.entries(active_only=True):
        if e.id in skip or "target_new" not in e.request:
            continue
        if not says_now(b, e.edit_request(), slots, success_fraction):
            lost.append(e)
    return lost
