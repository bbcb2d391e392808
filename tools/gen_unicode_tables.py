#!/usr/bin/env python3
"""Generates common/tok/tok_unicode_data.c: the Unicode general-category table of the tokenizer.

The pre-tokenizers (common/tok/tok_pretok.c) classify code points the way llama.cpp's regex splitters
do: letter (\\p{L}), number (\\p{N}), separator, mark, punctuation, symbol, other/control, or
unassigned. Whitespace (\\s) is a fixed list (Unicode's White_Space property) kept in
common/tok/tok_unicode.c, not here.

The table is a sorted list of ranges, one uint32 per range: (first code point << 3) | category.
A range runs until the next entry's first code point; the last one ends at U+10FFFF.

Sources of the general category, one of:
  (default)                 Python's own unicodedata module (its unidata_version);
  --ucd UnicodeData.txt     the Unicode Character Database file of some version;
  --node-unicode DIR        an unpacked npm package @unicode/unicode-X.Y.Z (its
                            General_Category/<Name>/ranges.mjs files).

The committed table must use the Unicode version that llama.cpp's own tables were generated from,
or tokenization of recently added characters differs from it. For llama.cpp v0.4.0 that is
Unicode 15.1.0; regenerate with
    npm pack @unicode/unicode-15.1.0 && tar xzf unicode-unicode-15.1.0-*.tgz
    python3 tools/gen_unicode_tables.py --node-unicode package --version 15.1.0 \\
        > common/tok/tok_unicode_data.c
    clang-format -i common/tok/tok_unicode_data.c
"""
import argparse
import re
import sys
import unicodedata

MAX_CP = 0x110000

# Must match enum tok_ucat in common/tok/tok_unicode.h.
UNDEF, NUMBER, LETTER, SEPARATOR, MARK, PUNCT, SYMBOL, CONTROL = range(8)
NAMES = ["UNDEF", "NUMBER", "LETTER", "SEPARATOR", "MARK", "PUNCT", "SYMBOL", "CONTROL"]

# Two-letter category -> ours, as llama.cpp's gen-unicode-data.py groups them.
BY_MAJOR = {"N": NUMBER, "L": LETTER, "Z": SEPARATOR, "M": MARK, "P": PUNCT, "S": SYMBOL,
            "C": CONTROL}

LONG_NAMES = {
    "Uppercase_Letter": "Lu", "Lowercase_Letter": "Ll", "Titlecase_Letter": "Lt",
    "Modifier_Letter": "Lm", "Other_Letter": "Lo",
    "Nonspacing_Mark": "Mn", "Spacing_Mark": "Mc", "Enclosing_Mark": "Me",
    "Decimal_Number": "Nd", "Letter_Number": "Nl", "Other_Number": "No",
    "Connector_Punctuation": "Pc", "Dash_Punctuation": "Pd", "Open_Punctuation": "Ps",
    "Close_Punctuation": "Pe", "Initial_Punctuation": "Pi", "Final_Punctuation": "Pf",
    "Other_Punctuation": "Po",
    "Math_Symbol": "Sm", "Currency_Symbol": "Sc", "Modifier_Symbol": "Sk", "Other_Symbol": "So",
    "Space_Separator": "Zs", "Line_Separator": "Zl", "Paragraph_Separator": "Zp",
    "Control": "Cc", "Format": "Cf", "Private_Use": "Co", "Surrogate": "Cs", "Unassigned": "Cn",
}


def category_of(gc):
    return UNDEF if gc == "Cn" else BY_MAJOR[gc[0]]


def from_python():
    return [category_of(unicodedata.category(chr(cp))) for cp in range(MAX_CP)]


def from_ucd(path):
    cats = [UNDEF] * MAX_CP
    first = None
    with open(path, encoding="utf-8") as f:
        for line in f:
            fields = line.rstrip("\n").split(";")
            if len(fields) < 3:
                continue
            cp, name, gc = int(fields[0], 16), fields[1], fields[2]
            if name.endswith(", First>"):
                first = cp
                continue
            lo = first if name.endswith(", Last>") else cp
            first = None
            for c in range(lo, cp + 1):
                cats[c] = category_of(gc)
    return cats


B64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"


def decode_node_ranges(s):
    """The package's decode-ranges.mjs: variable-length base64 deltas, then (gap, length-1)
    pairs of half-open ranges."""
    dec = {c: i for i, c in enumerate(B64)}
    deltas, i = [], 0
    while i < len(s):
        x = dec[s[i]]
        i += 1
        k = x & 56
        if k in (32, 40):
            x = ((x & 15) << 6) | dec[s[i]]
            i += 1
        elif k == 48:
            x = ((x & 7) << 12) | (dec[s[i]] << 6) | dec[s[i + 1]]
            i += 2
        elif k == 56:
            x = ((x & 7) << 18) | (dec[s[i]] << 12) | (dec[s[i + 1]] << 6) | dec[s[i + 2]]
            i += 3
        deltas.append(x)
    out, end = [], -1
    for j in range(1, len(deltas), 2):
        begin = end + 1 + deltas[j - 1]
        end = begin + 1 + deltas[j]
        out.append((begin, end))
    return out


def from_node(pkg):
    cats = [None] * MAX_CP
    for long_name, gc in LONG_NAMES.items():
        with open(f"{pkg}/General_Category/{long_name}/ranges.mjs", encoding="utf-8") as f:
            m = re.search(r"decodeRanges\('([^']*)'\)", f.read())
        for lo, hi in decode_node_ranges(m.group(1)):
            for c in range(lo, hi):
                if cats[c] is not None:
                    sys.exit(f"U+{c:04X} is in two general categories")
                cats[c] = category_of(gc)
    missing = [c for c in range(MAX_CP) if cats[c] is None]
    if missing:
        sys.exit(f"{len(missing)} code points have no category, first U+{missing[0]:04X}")
    return cats


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--ucd", help="UnicodeData.txt")
    src.add_argument("--node-unicode", help="unpacked npm package @unicode/unicode-X.Y.Z")
    ap.add_argument("--version", help="Unicode version, for the header comment")
    args = ap.parse_args()

    if args.ucd:
        cats, how = from_ucd(args.ucd), "--ucd UnicodeData.txt"
    elif args.node_unicode:
        cats, how = from_node(args.node_unicode), "--node-unicode <@unicode/unicode-X.Y.Z>"
    else:
        cats, how = from_python(), "(Python's unicodedata)"
    version = args.version or (unicodedata.unidata_version if not (args.ucd or args.node_unicode)
                               else "unknown")

    ranges = [(0, cats[0])]
    for cp in range(1, MAX_CP):
        if cats[cp] != ranges[-1][1]:
            ranges.append((cp, cats[cp]))

    print("/* tok_unicode_data.c — GENERATED by tools/gen_unicode_tables.py; do not edit.")
    print(" *")
    print(f" * Unicode {version} general categories, source {how}.")
    print(" * Regenerate as that script's docstring says. Each entry is (first code point << 3) |")
    print(" * enum tok_ucat; a range runs until the next entry; the last one ends at U+10FFFF. */")
    print('#include "common/tok/tok_unicode.h"')
    print()
    print(f"const uint32_t tok_ucat_ranges[{len(ranges)}] = {{")
    for i in range(0, len(ranges), 8):
        row = ranges[i:i + 8]
        print("\t" + " ".join(f"0x{(cp << 3) | c:07X}," for cp, c in row))
    print("};")
    print(f"const size_t tok_ucat_n_ranges = {len(ranges)};")


if __name__ == "__main__":
    main()
