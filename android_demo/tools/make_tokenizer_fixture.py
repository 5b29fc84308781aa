"""Regenerate the tokenizer fixture of the JVM tests (run once by a developer, output committed).

Trains a byte-level BPE exactly like mobiedit/factlm/train.py:train_tokenizer (same pre-tokenizer,
decoder, special tokens and BOS template) on a few sentences, then writes
  app/src/test/resources/fixtures/tokenizer.json   the HF tokenizers file
  app/src/test/resources/fixtures/tokenizer_cases.json   [{"text", "ids", "ids_no_special", "decoded"}]
  app/src/test/resources/fixtures/edit_batch_case.json   mobiedit.editing.context.build_edit_inputs output
so ByteLevelBpeTest / EditBatchBuilderTest can check the Java code against the real libraries.
Usage (from the repo root, with the project venv): .venv/bin/python android_demo/tools/make_tokenizer_fixture.py
"""
import json
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

OUT = Path(__file__).resolve().parents[1] / "app/src/test/resources/fixtures"
PAD, BOS, EOS = "<pad>", "<s>", "</s>"
SENTENCES = [
    "Danielle Darrieux speaks French.", "The mother tongue of Danielle Darrieux is French.",
    "Paris is the capital of France.", "Toko Yasuda plays the piano.", "Lionel Messi plays soccer.",
    "What is the capital of France? Paris.", "Berlin is a city in Germany.",
    "Ålesund is a town in Norway; it's known for Jugendstil.", "I can't believe it's 2024!",
    "The quick brown fox jumps over the lazy dog.", "Numbers: 12345 and 3.14 and 42.",
] * 3
CASES = [
    "Danielle Darrieux speaks", " French", "The capital of France is", "Toko Yasuda plays the",
    "It's 2024, isn't it?", "  two  spaces\tand tab\n", "Ålesund ümlaut — dash", "Paris. {} is a",
    "unseenwordxyz", "Lionel Messi is a", "<s>hello</s>", "",
]


def main() -> None:
    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=[PAD, BOS, EOS],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tk.train_from_iterator(SENTENCES, trainer)
    bos = tk.token_to_id(BOS)
    tk.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                      special_tokens=[(BOS, bos)])
    OUT.mkdir(parents=True, exist_ok=True)
    tk.save(str(OUT / "tokenizer.json"))
    cases = []
    for text in CASES:
        ids = tk.encode(text).ids
        plain = tk.encode(text, add_special_tokens=False).ids
        cases.append({"text": text, "ids": ids, "ids_no_special": plain,
                      "decoded": tk.decode(ids, skip_special_tokens=True)})
    (OUT / "tokenizer_cases.json").write_text(json.dumps(cases, ensure_ascii=False, indent=1) + "\n")
    write_batch_case(tk)
    print(f"wrote {OUT} ({tk.get_vocab_size()} tokens, {len(cases)} cases)")


def write_batch_case(tk) -> None:
    from transformers import PreTrainedTokenizerFast

    from mobiedit.requests import requests_from_cli
    from mobiedit.editing.config import ObjectiveConfig
    from mobiedit.editing.context import build_edit_inputs

    tok = PreTrainedTokenizerFast(tokenizer_object=tk, bos_token=BOS, eos_token=EOS, pad_token=PAD)
    req = requests_from_cli("Danielle Darrieux", "The mother tongue of Danielle Darrieux is", "French")[0]
    templates = ["{}", "The quick brown fox. {}", "I can't believe it. {}"]
    inp = build_edit_inputs(tok, req, templates, ObjectiveConfig())
    b = inp.batch
    case = {"subject": req.subject, "prompt": req.prompt, "target_new": req.target_new, "templates": templates,
            "n_rewrite": inp.n_rewrite, "target_len": inp.target_len, "input_ids": b.input_ids.tolist(),
            "attention_mask": b.attention_mask.tolist(), "subject_idx": b.subject_idx.tolist(),
            "last_idx": b.last_idx.tolist(), "labels": b.labels.tolist()}
    (OUT / "edit_batch_case.json").write_text(json.dumps(case) + "\n")


if __name__ == "__main__":
    main()
