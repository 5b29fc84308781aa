"""``mobiedit quantize``: write a pre-quantized checkpoint."""
from __future__ import annotations

import argparse

from ._common import Command, model_args


def add_quantize(sp: argparse.ArgumentParser) -> None:
    model_args(sp)
    sp.add_argument("--out", required=True, help="folder to write (replaced atomically)")
    sp.add_argument("--overwrite", action="store_true",
                    help="replace a non-empty --out folder that is not a previous `mobiedit quantize` output")
    sp.add_argument("--scheme", default="w8a16", choices=("w8a16", "w8a8"),
                    help="int8 weights with 16-bit (w8a16) or int8 (w8a8) activations")
    sp.add_argument("--layer", type=int, help="the edit layer whose MLP output stays float")
    sp.add_argument("--head-dtype", default="bfloat16", choices=("bfloat16", "float32"),
                    help="storage of the LM head and embedding (computed in fp32 either way); bfloat16 halves "
                         "a big-vocabulary model's largest matrix")


def cmd_quantize(args: argparse.Namespace) -> int:
    """int8 weights, the edit layer's MLP output and the LM head float; written atomically."""
    from ..forward.quant import QuantConfig
    from ..forward.quant_save import save_quantized
    from ..resolve import edit_layer_for, resolve_model

    model_dir = resolve_model(args)
    layer = edit_layer_for(model_dir, args.layer)
    out = save_quantized(model_dir, args.out, layer, QuantConfig(args.scheme, head_dtype=args.head_dtype),
                         overwrite=args.overwrite)
    print(f"wrote {out} ({args.scheme}; float islands: the layer-{layer} MLP output and the LM head, "
          f"head stored as {args.head_dtype})")
    return 0


QUANTIZE = Command(add_quantize, cmd_quantize,
                   "write a pre-quantized checkpoint (int8 weights; edit layer and LM head float)")
