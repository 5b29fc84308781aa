"""One interface over the three ways a program runs: eager PyTorch, ExecuTorch, ONNX Runtime.

A :class:`Program` takes a dict of named torch tensors (its :attr:`~Program.inputs`, in any
order; extra keys are ignored) and returns a dict of named float32/int64 torch tensors. Each
runtime is pinned to one thread (the phone runs the edit loop on one core; the dev box is shared).
"""
from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from mobiedit.errors import BundleError

log = logging.getLogger(__name__)


class Program:
    """A loaded program with named inputs and outputs."""

    runtime = "abstract"

    def __init__(self, inputs: list[str], outputs: list[str]) -> None:
        self.inputs, self.outputs = list(inputs), list(outputs)

    def _args(self, feed: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        missing = [n for n in self.inputs if n not in feed]
        if missing:
            raise BundleError(f"missing program inputs {missing}", where=f"{self.runtime} program",
                              fix=f"pass all of {self.inputs}")
        return [feed[n] for n in self.inputs]

    def _execute(self, args: list[torch.Tensor]) -> list[torch.Tensor]:
        raise NotImplementedError

    def run(self, feed: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """Run once; returns ``{output name: tensor}``."""
        outs = self._execute(self._args(feed))
        if len(outs) != len(self.outputs):
            raise BundleError(f"program returned {len(outs)} outputs, expected {self.outputs}",
                              where=f"{self.runtime} program", fix="re-export the bundle")
        return dict(zip(self.outputs, outs))


class EagerProgram(Program):
    """An ``nn.Module`` run by PyTorch (the reference)."""

    runtime = "eager"

    def __init__(self, module: torch.nn.Module | Callable, inputs: list[str], outputs: list[str]) -> None:
        super().__init__(inputs, outputs)
        self.module = module

    def _execute(self, args):
        with torch.no_grad():
            out = self.module(*args)
        return list(out) if isinstance(out, (tuple, list)) else [out]


def _single_thread_executorch() -> None:
    try:
        from executorch.extension.pybindings.portable_lib import _unsafe_reset_threadpool
    except ImportError:  # older wheels
        return
    _unsafe_reset_threadpool(1)


class ExecuTorchProgram(Program):
    """One method of a ``.pte`` file, run by ``executorch.runtime.Runtime`` (XNNPACK delegate)."""

    runtime = "executorch"

    def __init__(self, path: str | Path, method: str, inputs: list[str], outputs: list[str],
                 program: object | None = None) -> None:
        """``program``: an already loaded ``executorch.runtime.Program`` of ``path`` (methods of one
        file then share its weights in memory); loaded here when None."""
        super().__init__(inputs, outputs)
        program = program if program is not None else load_pte(path)
        if method not in program.method_names:
            raise BundleError(f"no method {method!r} (has {sorted(program.method_names)})", where=str(path),
                              fix="re-export the bundle")
        try:
            with quiet_native_output():
                self.method = program.load_method(method)
        except RuntimeError as e:
            raise BundleError(f"cannot load method {method!r} ({' '.join(str(e).split())[:150]})", where=str(path),
                              fix="re-export the bundle") from None

    def _execute(self, args):
        outs = self.method.execute([a.contiguous() for a in args])
        return [o.clone() for o in outs]  # outputs alias the method's planned memory


@contextlib.contextmanager
def quiet_native_output():
    """Send file descriptors 1 and 2 to /dev/null for the duration (C++ logging of the runtime:
    ExecuTorch's cpuinfo / threadpool lines, printed on every bundle command otherwise).
    Python's own streams are flushed first so that nothing printed before is lost."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    saved = [os.dup(1), os.dup(2)]
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in (*saved, devnull):
            os.close(fd)


def load_pte(path: str | Path):
    """Load a ``.pte`` file with ``executorch.runtime.Runtime`` (one thread; its C++ start-up
    logging silenced)."""
    with quiet_native_output():
        from executorch.runtime import Runtime

        _single_thread_executorch()
        try:
            return Runtime.get().load_program(Path(path))
        except RuntimeError as e:  # "Failed to load program, error: 0x23": not a .pte of this runtime
            err = BundleError(f"not a loadable ExecuTorch program ({' '.join(str(e).split())[:150]})",
                              where=str(path), fix="re-export the bundle (the file is damaged or not a .pte)")
    raise err


class OnnxProgram(Program):
    """An ``.onnx`` file run by ``onnxruntime.InferenceSession`` on the CPU EP, one thread."""

    runtime = "onnxruntime"

    def __init__(self, path: str | Path, inputs: list[str], outputs: list[str], exact_qdq: bool = False) -> None:
        """``exact_qdq``: Q/DQ nodes run as written (:mod:`~mobiedit.export.ort_session`)."""
        super().__init__(inputs, outputs)
        from .ort_session import open_session

        try:
            self.session = open_session(path, exact_qdq)
        except Exception as e:  # noqa: BLE001 - onnxruntime's own error types (InvalidProtobuf, Fail, ...)
            raise BundleError(f"not a loadable ONNX model ({type(e).__name__}: {' '.join(str(e).split())[:150]})",
                              where=str(path), fix="re-export the bundle (the file is damaged or not .onnx)") from None
        have = [i.name for i in self.session.get_inputs()]
        if set(have) != set(self.inputs):
            raise BundleError(f"model inputs {have} differ from the manifest's {self.inputs}", where=str(path),
                              fix="re-export the bundle")

    def _execute(self, args):
        feed = {n: np.ascontiguousarray(a.detach().cpu().numpy()) for n, a in zip(self.inputs, args)}
        outs = self.session.run(self.outputs, feed)
        return [torch.from_numpy(np.asarray(o)) for o in outs]


def open_program(runtime: str, path: str | Path, method: str | None, inputs: list[str],
                 outputs: list[str], loaded: dict | None = None, exact_qdq: bool = False) -> Program:
    """Load one program of a bundle (``method`` names the ``.pte`` method; ignored for ONNX).
    ``loaded``: a dict reused across calls so that each ``.pte`` file is loaded once.
    ``exact_qdq``: see :class:`OnnxProgram`."""
    if not Path(path).is_file():
        raise BundleError("program file is missing", where=str(path), fix="re-export the bundle")
    if runtime == "executorch":
        cache = loaded if loaded is not None else {}
        if str(path) not in cache:
            cache[str(path)] = load_pte(path)
        return ExecuTorchProgram(path, method or "forward", inputs, outputs, program=cache[str(path)])
    if runtime == "onnxruntime":
        return OnnxProgram(path, inputs, outputs, exact_qdq=exact_qdq)
    raise BundleError(f"unknown runtime {runtime!r}", where="manifest.json, field 'runtime'",
                      fix="use a bundle written by `mobiedit export`")
