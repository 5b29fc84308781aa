"""Regenerate the SmolLM2 tokenizer + chat fixtures of the JVM tests (run once by a developer, output committed).

Reads the tokenizer of SmolLM2-135M-Instruct (`mobiedit model smollm2-135m`; 49,152 tokens, byte-level
BPE, ChatML chat template) and writes app/src/test/resources/fixtures/smollm2/:

  tokenizer.json.gz      the model's tokenizer.json, gzipped (3.5 MB → ~1 MB; gzip mtime 0, reproducible)
  chat_template.jinja    the model's chat template, verbatim (what a bundle ships)
  tokenizer_cases.json   {"n_non_ascii", "cases": [{"text", "ids", "ids_no_special", "decoded"}]}: >= 1,000
                         strings, many non-ASCII (17 scripts, emoji with ZWJ / flags / skin tones, combining
                         marks, Unicode whitespace, special tokens inside text, seeded random strings),
                         encoded and decoded by the `tokenizers` library
  chat_cases.json        [{"messages", "add_generation_prompt", "text", "ids"}]: transformers'
                         apply_chat_template(tokenize=False) and the ids of that text (no added specials)

ByteLevelBpeSmolLM2Test and ChatTemplateTest compare the Java code against them.
Usage (from the repo root, with the project venv): .venv/bin/python android_demo/tools/make_smollm2_tokenizer_fixture.py
"""
from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "app/src/test/resources/fixtures/smollm2"
N_RANDOM = 560
SEED = 20241201

MULTILINGUAL = [
    "La tour Eiffel se trouve à Paris, capitale de la France.", "Où est la tour Eiffel ? Réponds en français.",
    "Der Eiffelturm steht in Paris. Über 300 Meter hoch – größer als der Kölner Dom!",
    "¿Dónde está la Torre Eiffel? Está en París, ¡claro!", "A Torre Eiffel fica em Paris; não em Roma.",
    "Wieża Eiffla znajduje się w Paryżu. Zażółć gęślą jaźń.", "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "Eyfel Kulesi Paris'te bulunur; İstanbul'da değil. Işık, ğ, ş, ç.", "Ο Πύργος του Άιφελ βρίσκεται στο Παρίσι.",
    "Эйфелева башня находится в Париже. Съешь же ещё этих мягких французских булок.",
    "Ейфелева вежа знаходиться в Парижі. Ґанок, їжак, є.", "برج إيفل يقع في مدينة باريس الفرنسية.",
    "מגדל אייפל נמצא בפריז.", "एफिल टॉवर पेरिस में स्थित है।", "আইফেল টাওয়ার প্যারিসে অবস্থিত।",
    "หอไอเฟลตั้งอยู่ที่กรุงปารีส", "埃菲尔铁塔位于法国巴黎。", "エッフェル塔はパリにあります。ひらがなとカタカナ。",
    "에펠탑은 파리에 있습니다.", "Tháp Eiffel nằm ở thành phố Paris, nước Pháp.",
    "Emoji: 🗼🇫🇷 👩‍👩‍👧‍👦 👍🏽 ❤️ 🤖✨", "Math: ∀x ∈ ℝ, x² ≥ 0; ∑ᵢ aᵢ ≠ ∞ ≈ π ≤ √2",
    "Combining: e\u0301 vs é, n\u0303 vs ñ, a\u0308\u0301", "Full-width: ＡＢＣ１２３！ and half-width ｶﾀｶﾅ",
    "Ligatures ﬁ ﬂ and ß → SS; Ångström Å", "Zero\u200bwidth\u200cjoiners\u200dhere and\u2060word joiner",
    "NBSP:\u00a0here, ideographic\u3000space, thin\u2009space, em\u2003space",
    "Line\u2028separator and paragraph\u2029separator and NEL\u0085end",
    "Tabs\tand\nnewlines\r\nCRLF  double  spaces   triple", "   leading and trailing spaces   ",
    "I'm sure it's fine, isn't it? You'll see; they'd've known. She'S LOUD. WE'RE HERE.",
    "Numbers: 12345, 3.14159, 1,000,000, 2024-12-01, 0x1F, 1e-9, ½ ¾ ² ³ ① Ⅻ",
    "URL https://example.com/a?b=c&d=e#f and email someone@example.org",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n", "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "Text <|endoftext|> inside and <|im_sta partial <|im_end|", "<repo_name>mobiedit<file_sep>main.py",
    "Ελληνικά και English mixed with русский and 中文 in one line.", "Café naïve résumé coöperate façade jalapeño",
    "Dvořák, Łódź, Þórr, Ærøskøbing, Şanlıurfa, Kraków", "₹100, €20, £5, ¥300, ₿0.1, $9.99",
    "«Guillemets» „Anführungszeichen“ “curly” ‘single’ — dash – en-dash … ellipsis",
    "Korean jamo: 각 and precomposed 각", "Devanagari with virama: क्षत्रिय", "Thai vowels: กำ เก แก โก",
    "Arabic with harakat: مُحَمَّد and digits ١٢٣", "Emoji flags: 🇯🇵🇩🇪🇺🇸 keycap 1️⃣ #️⃣",
    "Supplementary: 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛 𠀀𠀁 😀😃😄", "Control-ish: \u0007bell \u001bescape \u007fdel",
    "Mixed scripts: Παρίσι/Париж/パリ/巴黎/파리/باريس", "", " ", "\n", "\t\t", "a", "é", "🙂",
]

POOLS = {
    "ascii": "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ",
    "digits": "0123456789٠١٢३४५",
    "punct": "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~«»—–…¿¡·•",
    "space": [" ", " ", " ", "  ", "\t", "\n", "\r\n", "\u00a0", "\u3000", "\u2009", "\u2028", "\u0085", "\u200b"],
    "latin": "àáâãäåæçèéêëìíîïñòóôõöøùúûüýÿßđłœŠŽ",
    "greek_cyr": "αβγδεζηθλμπσωΑΒΓДЖЗИЙКЛМНОПабвгдежзийклмнопрстуфхцчшщъыьэюяёїєґ",
    "cjk": "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年東京日本語中文漢字かなカナ한국어",
    "other": "אבגדהابتثجحخدذهحअआइईउऊकखगघกขคงจ",
    "emoji": ["😀", "🎉", "🗼", "🇫🇷", "👍🏽", "👩‍💻", "❤️", "🤖", "✨", "🔥", "𝔘", "𠀀"],
    "combining": ["\u0301", "\u0308", "\u0303", "\u0327", "\u20dd"],
}
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]


def random_text(rng: random.Random) -> str:
    """A seeded random string mixing scripts, whitespace kinds, emoji, combining marks, specials."""
    parts = []
    for _ in range(rng.randint(1, 14)):
        pool = rng.choice(list(POOLS))
        if pool == "space" or pool == "emoji" or pool == "combining":
            parts.append(rng.choice(POOLS[pool]))
        else:
            parts.append("".join(rng.choice(POOLS[pool]) for _ in range(rng.randint(1, 8))))
        if rng.random() < 0.03:
            parts.append(rng.choice(SPECIALS))
    return "".join(parts)


def word_salad(rng: random.Random, words: list[str]) -> str:
    """Words of the hand-written sentences joined by random whitespace / punctuation."""
    seps = [" ", " ", " ", "  ", "\n", "\t", ", ", ". ", "\u00a0", "'s ", "'ll "]
    return "".join(rng.choice(words) + rng.choice(seps) for _ in range(rng.randint(1, 9))).rstrip(" ")


def counterfact_texts(n: int) -> list[str]:
    from mobiedit.requests import bundled_path

    recs = json.loads(bundled_path("counterfact-edit-1k.json").read_text())
    out = []
    for r in recs[:n]:
        prompt = r["prompt"].replace("{}", r["subject"]) if "{}" in r["prompt"] else r["prompt"]
        out += [prompt, f"{prompt} {r['target_new']}"]
    return out


def conversations() -> list[tuple[list[dict], bool]]:
    return [
        ([{"role": "user", "content": "Where is the Eiffel Tower?"}], True),
        ([{"role": "user", "content": "The Eiffel Tower is located in the city of"}], True),
        ([{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Capital of France?"}], True),
        ([{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello! How can I help?"},
          {"role": "user", "content": "Où est la tour Eiffel ? 🗼"}], True),
        ([{"role": "user", "content": "Say hi."}, {"role": "assistant", "content": "Hi!"}], False),
        ([{"role": "system", "content": ""}, {"role": "user", "content": "  spaces\tand\nnewlines  "}], True),
    ]


def main() -> None:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    from mobiedit.checkpoints import ensure_checkpoint

    src = ensure_checkpoint("smollm2-135m")
    tk = Tokenizer.from_file(str(src / "tokenizer.json"))
    hf = AutoTokenizer.from_pretrained(src, local_files_only=True)
    rng = random.Random(SEED)
    words = [w for s in MULTILINGUAL for w in s.split()]
    texts = MULTILINGUAL + counterfact_texts(200) + [random_text(rng) for _ in range(N_RANDOM)]
    texts += [word_salad(rng, words) for _ in range(120)]
    texts = list(dict.fromkeys(texts))  # unique, order kept
    cases = []
    for text in texts:
        ids = tk.encode(text).ids
        cases.append({"text": text, "ids": ids, "ids_no_special": tk.encode(text, add_special_tokens=False).ids,
                      "decoded": tk.decode(ids, skip_special_tokens=True)})
    n_non_ascii = sum(1 for t in texts if any(ord(c) > 127 for c in t))
    OUT.mkdir(parents=True, exist_ok=True)
    raw = (src / "tokenizer.json").read_bytes()
    with open(OUT / "tokenizer.json.gz", "wb") as fh, gzip.GzipFile(fileobj=fh, mode="wb", mtime=0, filename="") as gz:
        gz.write(raw)
    (OUT / "chat_template.jinja").write_text(hf.chat_template, encoding="utf-8")
    (OUT / "tokenizer_cases.json").write_text(json.dumps({"n_non_ascii": n_non_ascii, "cases": cases},
                                                         ensure_ascii=False) + "\n", encoding="utf-8")
    chats = []
    for msgs, gen in conversations():
        text = hf.apply_chat_template(msgs, tokenize=False, add_generation_prompt=gen)
        chats.append({"messages": msgs, "add_generation_prompt": gen, "text": text,
                      "ids": tk.encode(text, add_special_tokens=False).ids})
    (OUT / "chat_cases.json").write_text(json.dumps(chats, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}: {len(cases)} tokenizer cases ({n_non_ascii} non-ASCII), {len(chats)} chat cases, "
          f"tokenizer.json.gz {(OUT / 'tokenizer.json.gz').stat().st_size} bytes")


if __name__ == "__main__":
    main()
