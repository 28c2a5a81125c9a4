#!/usr/bin/env python3
"""What Hugging Face `tokenizers` takes each code point to be, measured rather than assumed.

Runs where `tokenizers` is installed (the GPU machine):
    python3 tools/hf_unicode_probe.py --unicode-data UnicodeData.txt --out probe.json
(UnicodeData.txt: any recent one, for the list of compositions to try.) The output is committed
as tests/data/tokenizer/hf_unicode_probe.json, which tests/tokenizer/test_unicode.cpp checks.

Writes, for every code point (surrogates excepted):
- classes: the code points each pre-tokenizer class (\\p{L}, \\p{N}, \\p{M}, \\p{P}, \\p{S}, \\s)
  matches in a Split regex (Oniguruma), as [first, last] ranges;
- caseless: the characters c for which "'c" matches (?i:'s|'t|'m|'d);
- nfc_single: NFC of each code point alone, where it is not the code point itself;
- nfc_pairs: NFC of each two-character canonical decomposition in UnicodeData.txt (plus the
  compositions Unicode 16.0 added), where it composes;
- nfc_reorder: NFC of " " + c + U+0334 and of " " + U+0345 + c where it changes them (canonical
  reordering, which shows the combining class it knows for c).
tools/gen_unicode_tables.py --check-probe compares the pinned tables with this file too.
"""

import argparse
import json

import tokenizers
from tokenizers import Regex, normalizers, pre_tokenizers

ALL = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]

# Compositions new in Unicode 16.0 (absent from older UnicodeData.txt files).
UNICODE16_PAIRS = [(0x105D2, 0x0307), (0x105DA, 0x0307), (0x1611E, 0x1611E), (0x1611E, 0x16129),
                   (0x1611E, 0x1611F), (0x16129, 0x1611F), (0x1611E, 0x16120), (0x16D67, 0x16D67),
                   (0x16D63, 0x16D67), (0x16D69, 0x16D67), (0x113C2, 0x113C2), (0x113C2, 0x113B8),
                   (0x113C2, 0x113C9), (0x11382, 0x113C9), (0x11390, 0x113C9), (0x11389, 0x113C2),
                   (0x1138B, 0x113C2), (0x11390, 0x113C2)]


def ranges(cps):
    out = []
    for c in sorted(cps):
        if out and out[-1][1] == c - 1:
            out[-1][1] = c
        else:
            out.append([c, c])
    return out


def class_members(pattern, text):
    # "removed" drops every match: what stays is the complement, one character per code point.
    kept = pre_tokenizers.Split(Regex(pattern), behavior="removed").pre_tokenize_str(text)
    kept_set = {ord(ch) for piece, _ in kept for ch in piece}
    return [c for c in ALL if c not in kept_set]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--unicode-data", required=True)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    text = "".join(map(chr, ALL))
    classes = {p: ranges(class_members(p, text))
               for p in [r"\p{L}", r"\p{N}", r"\p{M}", r"\p{P}", r"\p{S}", r"\s"]}

    # "'c" for every c, separated by NUL (which no alternative starts or ends with).
    quoted = "".join("'" + chr(c) + "\0" for c in ALL)
    pieces = pre_tokenizers.Split(Regex(r"(?i:'s|'t|'m|'d)"), behavior="isolated").pre_tokenize_str(quoted)
    caseless = sorted(ord(p[1]) for p, _ in pieces if len(p) == 2 and p[0] == "'" and p[1] != "\0")

    nfc = normalizers.NFC()
    nfc_single = {}
    for c in ALL:
        s = chr(c)
        n = nfc.normalize_str(s)
        if n != s:
            nfc_single[c] = [ord(x) for x in n]

    pairs = list(UNICODE16_PAIRS)
    with open(args.unicode_data, encoding="utf-8") as f:
        for line in f:
            fields = line.split(";")
            d = fields[5].split()
            if len(d) == 2 and not d[0].startswith("<"):
                pairs.append((int(d[0], 16), int(d[1], 16)))
    nfc_pairs = {}
    for a, b in pairs:
        n = nfc.normalize_str(chr(a) + chr(b))
        if len(n) == 1:
            nfc_pairs[f"{a:X} {b:X}"] = ord(n)

    # Canonical reordering around U+0334 (class 1) and U+0345 (class 240): where NFC changes
    # these strings, its output (which depends on the combining class it knows for c).
    nfc_reorder = {}
    for c in ALL:
        for which, s in enumerate((" " + chr(c) + "\u0334", " \u0345" + chr(c))):
            n = nfc.normalize_str(s)
            if n != s:
                nfc_reorder.setdefault(f"{c:X}", []).append([which, [ord(x) for x in n]])

    out = {
        "tokenizers_version": tokenizers.__version__,
        "classes": classes,
        "caseless": caseless,
        "nfc_single": nfc_single,
        "nfc_pairs": nfc_pairs,
        "nfc_reorder": nfc_reorder,
    }
    with open(args.out, "w", encoding="utf-8") as f:  # one line per key: small diffs
        f.write("{\n" + ",\n".join(f" {json.dumps(k)}: {json.dumps(v, separators=(',', ':'))}"
                                   for k, v in out.items()) + "\n}\n")
    print(f"{args.out}: tokenizers {tokenizers.__version__}, "
          + ", ".join(f"{k} {len(v)} ranges" for k, v in classes.items()))


if __name__ == "__main__":
    main()
