"""Minimal module hooks (after ROME's ``util/nethook.py``): read a module's input or output, or
rewrite its output, for the duration of a ``with`` block.

Invariant: hooks are removed when the block exits, even on error; the model is never left hooked.
"""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch


class StopForward(Exception):
    """Raised by a ``stop=True`` :func:`record` hook to end a forward pass early; caught by the block."""


class Recorder:
    """Holds what a :func:`record` hook saw on the last forward call."""

    input: torch.Tensor | None = None
    output: torch.Tensor | None = None


@contextlib.contextmanager
def record(module: torch.nn.Module, *, inputs: bool = True, outputs: bool = True,
           detach: bool = True, stop: bool = False) -> Iterator[Recorder]:
    """Record the first positional input and the output of ``module`` on each forward.

    ``stop=True`` ends the forward pass right after ``module`` (ROME's ``nethook.Trace(stop=True)``):
    nothing downstream runs — no later layer, no logits — and the block exits normally.
    """
    rec = Recorder()

    def hook(_mod, args, out):
        if inputs:
            rec.input = args[0].detach() if detach else args[0]
        if outputs:
            o = out[0] if isinstance(out, tuple) else out
            rec.output = o.detach() if detach else o
        if stop:
            raise StopForward

    handle = module.register_forward_hook(hook)
    try:
        yield rec
    except StopForward:
        if not stop:
            raise
    finally:
        handle.remove()


@contextlib.contextmanager
def rewrite_output(module: torch.nn.Module,
                   fn: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[None]:
    """Replace ``module``'s output ``y`` by ``fn(y)`` on every forward inside the block."""

    def hook(_mod, _args, out):
        if isinstance(out, tuple):
            return (fn(out[0]),) + tuple(out[1:])
        return fn(out)

    handle = module.register_forward_hook(hook)
    try:
        yield
    finally:
        handle.remove()


def add_at_positions(delta: torch.Tensor, positions: torch.Tensor) -> Callable[[torch.Tensor], torch.Tensor]:
    """An output rewrite adding ``delta`` [d] (or [B, d]) at ``positions`` [B] of a [B, T, d] output.

    The addition is out of place so autograd sees it when ``delta`` requires grad.
    """

    def fn(y: torch.Tensor) -> torch.Tensor:
        rows = torch.arange(y.shape[0], device=y.device)
        add = torch.zeros_like(y)
        add[rows, positions] = delta.to(y.dtype) if delta.dim() == 2 else delta.to(y.dtype).expand(len(rows), -1)
        return y + add

    return fn
