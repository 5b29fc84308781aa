"""Load a converted checkpoint folder with plain ``transformers`` (no mobiedit code) and print its
greedy answers to the four prompts of issue 14.

    python tools/greedy_answers.py "$(mobiedit model smollm2-135m)" [--tokens 4]

Shows that the folder ``mobiedit model NAME`` prints is an ordinary HF folder that
``AutoModelForCausalLM.from_pretrained`` loads, and that the conversion kept the model's knowledge.
"""
from __future__ import annotations

import argparse

PROMPTS = ("The capital of France is", "The Eiffel Tower is located in the city of",
           "The mother tongue of Danielle Darrieux is", "Toyota is a company from")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("folder", help="HF folder (e.g. the output of `mobiedit model NAME`)")
    ap.add_argument("--tokens", type=int, default=4, help="new tokens per answer")
    args = ap.parse_args()

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(args.folder)
    model = AutoModelForCausalLM.from_pretrained(args.folder, dtype=torch.float32).eval()
    print(f"{type(model).__name__} from {args.folder}: {sum(p.numel() for p in model.parameters()) / 1e6:.1f} M parameters")
    for prompt in PROMPTS:
        enc = tok(prompt, return_tensors="pt")
        with torch.no_grad():
            out = model.generate(**enc, max_new_tokens=args.tokens, do_sample=False, pad_token_id=tok.eos_token_id)
        print(f"{prompt!r} -> {tok.decode(out[0, enc['input_ids'].shape[1]:])!r}")


if __name__ == "__main__":
    main()
