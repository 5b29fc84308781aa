"""Lowering forward-only graphs to ExecuTorch and ONNX; phone bundles. Installed as ``mobiedit.export``."""
