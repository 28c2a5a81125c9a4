#!/usr/bin/env python3
"""Hugging Face ids of one short string per code point, for every code point a tokenizer may see.

Runs where `tokenizers` is installed (the GPU machine):
    python3 tools/hf_codepoint_ids.py --tokenizers DIR --out DIR [--names qwen3 llama3 deepseek_v3]
reads DIR/<name>/tokenizer.json (or tokenizer.json.gz) and writes <out>/ids_<name>.txt.gz: one
line per code point, "HEX id id id ...", the ids of codepoint_context(c) without special tokens.

Covered: every code point of planes 0-3 and 14 (all that Unicode assigns outside private use)
and every 97th of the rest. Too large to commit (about 11 MB): docs/tokenizer-unicode.md says how
they were compared with braidinfer once; the committed goldens (tools/tokenizer_unicode_goldens.py)
use the same context on a sample of code points.
"""

import argparse
import gzip
import os
import tempfile

import tokenizers


def codepoint_context(c):
    """The string each code point is tried in (tools/tokenizer_unicode_goldens.py uses the same):
    after and before a letter, after a space, before a digit, doubled, after a newline."""
    ch = chr(c)
    return "a" + ch + "b " + ch + "1" + ch + ch + "\n" + ch


def covered():
    for c in range(0x110000):
        if 0xD800 <= c <= 0xDFFF:
            continue
        if c < 0x40000 or 0xE0000 <= c <= 0xE0FFF or c % 97 == 0:
            yield c


def load(path):
    if os.path.exists(path):
        return tokenizers.Tokenizer.from_file(path)
    with gzip.open(path + ".gz", "rb") as f, tempfile.NamedTemporaryFile(suffix=".json") as t:
        t.write(f.read())
        t.flush()
        return tokenizers.Tokenizer.from_file(t.name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokenizers", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--names", nargs="+", default=["qwen3", "llama3", "deepseek_v3"])
    args = ap.parse_args()
    cps = list(covered())
    texts = [codepoint_context(c) for c in cps]
    for name in args.names:
        tok = load(os.path.join(args.tokenizers, name, "tokenizer.json"))
        encodings = tok.encode_batch(texts, add_special_tokens=False)
        out = os.path.join(args.out, f"ids_{name}.txt.gz")
        with gzip.open(out, "wt", encoding="ascii") as f:
            for c, e in zip(cps, encodings):
                f.write(f"{c:X} " + " ".join(map(str, e.ids)) + "\n")
        print(f"{out}: {len(cps)} code points, tokenizers {tokenizers.__version__}")


if __name__ == "__main__":
    main()
