"""``mobiedit demo`` end to end on a tiny model (the README's main command edits SmolLM2; the
same code path, with the phone bundle's answers from ONNX Runtime)."""
from __future__ import annotations

from mobiedit.cli import main


def test_demo_prints_both_methods_and_answers_from_a_bundle(tiny_llama_dir, capsys):
    rc = main(["--quiet", "demo", "--model", str(tiny_llama_dir), "--layer", "0", "--tokens", "2",
               "--quant", "fp32"])  # the shipped QDQ calibration is tested in test_export_quantized
    out = capsys.readouterr().out
    assert rc == 0, out
    assert "Edit: 'The Eiffel Tower is located in the city of': 'Paris' -> 'Rome'" in out
    for title in ("== MobiEdit (forward-only", "== ROME (backprop"):
        block = out.split(title)[1]
        assert "loss evaluations" in block and "peak RSS" in block and "the edited model's check" in block
        assert block.count("before:") >= 3 and block.count("after:") >= 3
    assert "== Phone bundle of the MobiEdit-edited model: onnxruntime fp32" in out and out.count("bundle: ") == 3
