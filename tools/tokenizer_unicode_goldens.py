#!/usr/bin/env python3
"""Golden ids from Hugging Face `tokenizers` for strings that probe the tokenizer's Unicode data.

Two steps:
  here (needs the UCD: bash scripts/fetch-ucd.sh):
    python3 tools/tokenizer_unicode_goldens.py --sample
  writes tests/data/tokenizer/unicode_strings.json: the strings of the three defects of issue 20
  (U+180E, letters and emoji of Unicode 15 and 16, U+11935 U+11930 under NFC) and one short
  context per code point of a seeded sample of every assigned code point;
  on the GPU machine (it has `tokenizers`):
    python3 tools/tokenizer_unicode_goldens.py --tokenizers .cache/tokenizers --out $OUT
  writes <out>/goldens_unicode_{qwen3,llama3,deepseek_v3}.json, committed under
  tests/data/tokenizer/ and checked by tests/tokenizer/test_tokenizer_unicode.cpp.
"""

import argparse
import hashlib
import json
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
STRINGS_FILE = os.path.join(ROOT, "tests", "data", "tokenizer", "unicode_strings.json")
NAMES = ["qwen3", "llama3", "deepseek_v3"]
SEED = 20  # issue 20
PER_CATEGORY = 24
PER_NEW_VERSION = 60

# The defects' strings: U+180E (not \s for Oniguruma), characters of Unicode 15.0, 15.1 and 16.0
# (letters, digits, emoji), and U+11935 U+11930, which NFC composes only from Unicode 13 on.
DEFECT_STRINGS = [
    "a\u180eb",
    "x \u180e y\u180e\u180e z\u180e",
    "word\u180e\u180e \u180e",
    "\U00011f04\U00011f05\U00011f06 Kawi \U00031350\U00031351 \U0002ebf0 \u1c89\u1c8a \U00010d50\U00010d70",
    "faces \U0001fae8\U0001fae9 \U0001fa77 \U0001fadf x\U0001fae8y",
    "digits \U00011f50\U00011f51 \U00010d40\U00010d41 \U0001ccf0\U0001ccf1 3\U00011f52",
    "\U00011935\U00011930",
    "a\U00011935\U00011930b \U00011938",
    "\u0915\u093c \u0061\u0301\u0316 \u1e0b\u0323",
]


def codepoint_context(c):
    """After and before a letter, after a space, before a digit, doubled, after a newline: each
    pre-tokenizer class of c splits this differently. tools/hf_codepoint_ids.py uses the same."""
    ch = chr(c)
    return "a" + ch + "b " + ch + "1" + ch + ch + "\n" + ch


def sample_code_points():
    import importlib.util
    spec = importlib.util.spec_from_file_location("gen", os.path.join(ROOT, "tools", "gen_unicode_tables.py"))
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    ucd = os.path.join(ROOT, ".cache", "ucd", gen.GC_VERSION)
    gc = gen.general_categories(ucd)
    age = {}
    for e in gen.load(ucd, "DerivedAge.json"):
        a, b = gen.span(e)
        for c in range(a, b + 1):
            age[c] = e["unicodeVersion"]
    rng = random.Random(SEED)
    chosen = set()
    by_category = {}
    for c in range(0x110000):
        by_category.setdefault(gc[c], []).append(c)
    for cat in sorted(by_category):  # every category, unassigned (Cn) and private use too
        if cat == "Cs":
            continue  # surrogates are not text
        members = by_category[cat]
        chosen.update(rng.sample(members, min(PER_CATEGORY, len(members))))
    for version in ["14.0", "15.0", "15.1", "16.0"]:  # newer than some libraries' tables
        members = sorted(c for c, v in age.items() if v == version)
        chosen.update(rng.sample(members, min(PER_NEW_VERSION, len(members))))
    # The class edges: every \s character and the format characters next to them.
    chosen.update([0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x20, 0x85, 0xA0, 0x1680, 0x180E, 0x2028, 0x2029,
                   0x202F, 0x205F, 0x3000, 0xFEFF, 0x200B, 0x200C, 0x200D, 0x2060, 0x17F])
    chosen.update(range(0x2000, 0x200B))
    return sorted(chosen)


def write_strings():
    cps = sample_code_points()
    data = {"seed": SEED, "defect_strings": DEFECT_STRINGS, "code_points": cps,
            "strings": DEFECT_STRINGS + [codepoint_context(c) for c in cps]}
    with open(STRINGS_FILE, "w", encoding="utf-8") as f:
        f.write("{\n")
        f.write(f' "seed": {SEED},\n')
        f.write(' "defect_strings": ' + json.dumps(DEFECT_STRINGS, ensure_ascii=True) + ",\n")
        f.write(' "code_points": ' + json.dumps(cps) + ",\n")
        f.write(' "strings": [\n  ' + ",\n  ".join(json.dumps(s, ensure_ascii=True) for s in data["strings"]) + "\n ]\n}\n")
    print(f"{STRINGS_FILE}: {len(DEFECT_STRINGS)} defect strings, {len(cps)} code points")


def write_goldens(tokenizers_dir, out_dir, strings_file):
    import tokenizers
    with open(strings_file, encoding="utf-8") as f:
        strings = json.load(f)["strings"]
    os.makedirs(out_dir, exist_ok=True)
    for name in NAMES:
        path = os.path.join(tokenizers_dir, name, "tokenizer.json")
        tok = tokenizers.Tokenizer.from_file(path)
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        ids = [e.ids for e in tok.encode_batch(strings, add_special_tokens=False)]
        out = os.path.join(out_dir, f"goldens_unicode_{name}.json")
        with open(out, "w", encoding="utf-8") as f:
            f.write("{\n")
            f.write(f' "tokenizer": "{name}",\n "tokenizer_json_sha256": "{digest}",\n')
            f.write(f' "tokenizers_version": "{tokenizers.__version__}",\n')
            f.write(' "ids": [\n  ' + ",\n  ".join(json.dumps(i, separators=(",", ":")) for i in ids) + "\n ]\n}\n")
        print(f"{out}: {len(strings)} strings, tokenizers {tokenizers.__version__}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sample", action="store_true", help="write the strings file (needs the UCD)")
    ap.add_argument("--tokenizers", help="folder with qwen3/, llama3/, deepseek_v3/ inside")
    ap.add_argument("--out", help="folder for goldens_unicode_<name>.json")
    ap.add_argument("--strings", default=STRINGS_FILE, help="the strings file (default: %(default)s)")
    args = ap.parse_args()
    if args.sample:
        write_strings()
    elif args.tokenizers and args.out:
        write_goldens(args.tokenizers, args.out, args.strings)
    else:
        ap.error("either --sample, or --tokenizers and --out")


if __name__ == "__main__":
    main()
