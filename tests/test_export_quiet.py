"""An ONNX export and its QDQ quantization print none of the libraries' chatter once
:func:`mobiedit.quiet.quiet_libraries` ran (the demo's phone path printed "[torch.onnx] Run
decompositions...", "torchvision is not installed. Skipping torchvision::nms" and ONNX Runtime's
"Please consider to run pre-processing before quantization" between its results). Without it the
same script prints them, so the check can fail."""
from __future__ import annotations

import subprocess
import sys

import pytest

SCRIPT = r'''
import logging, sys, tempfile
from pathlib import Path
QUIET
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
import numpy as np, torch
from mobiedit.export.config import QuantizeConfig
from mobiedit.export.lower import to_onnx
from mobiedit.export.onnx_qdq import qdq_quantize

ep = torch.export.export(torch.nn.Sequential(torch.nn.Linear(8, 4)), (torch.randn(2, 8),))
with tempfile.TemporaryDirectory() as d:
    src, dst = Path(d) / "m.onnx", Path(d) / "q.onnx"
    to_onnx(ep, src, ["x"], ["y"], 18)
    feeds = [{"x": np.random.default_rng(i).standard_normal((2, 8)).astype(np.float32)} for i in range(2)]
    info = qdq_quantize(src, dst, feeds, set(), QuantizeConfig())
    logging.getLogger("mobiedit.probe").warning("quantized %d", info["quantized_ops"])
'''
CHATTER = ("torchvision", "pre-processing", "opset version")


@pytest.mark.parametrize("quiet", [True, False])
def test_onnx_export_and_qdq_print_no_library_chatter(quiet):
    code = SCRIPT.replace("QUIET", "from mobiedit.quiet import quiet_libraries; quiet_libraries()" if quiet else "pass")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-2000:]
    assert "WARNING mobiedit.probe: quantized 1" in out  # our own warnings still reach the user
    assert "[torch.onnx]" not in out  # to_onnx asks the exporter for no progress lines, either way
    found = [c for c in CHATTER if c in out]
    if quiet:
        assert not found, out[-3000:]
    else:  # the libraries do print them: the quiet run above is not quiet by accident
        assert len(found) == len(CHATTER), out[-3000:]
