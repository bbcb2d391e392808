#!/usr/bin/env python3
"""gguf_set_str.py IN OUT KEY VALUE: a copy of the GGUF file IN with the string KEY set to VALUE.

The oracle tests use it to make vocabularies the shared data has none of, e.g. Llama 3's tokens
under the gpt-4o pre-tokenizer (tokenizer.ggml.pre), so that layermesh and llama.cpp can be
compared on it. KEY must exist and be a string. Tensor infos and data are copied unchanged; the
data section is re-aligned after the longer or shorter metadata.
"""
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
STRING, ARRAY, U32 = 8, 9, 4


class Reader:
    def __init__(self, data):
        self.data, self.pos = data, 0

    def take(self, n):
        if self.pos + n > len(self.data):
            sys.exit("gguf_set_str: the file ends inside its metadata")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def u32(self):
        return struct.unpack("<I", self.take(4))[0]

    def u64(self):
        return struct.unpack("<Q", self.take(8))[0]

    def string(self):
        return self.take(self.u64())

    def skip_value(self, vtype):
        if vtype == STRING:
            self.string()
        elif vtype == ARRAY:
            itype, n = self.u32(), self.u64()
            for _ in range(n):
                self.skip_value(itype)
        elif vtype in SIZES:
            self.take(SIZES[vtype])
        else:
            sys.exit(f"gguf_set_str: unknown value type {vtype}")


def main():
    if len(sys.argv) != 5:
        sys.exit("usage: gguf_set_str.py IN OUT KEY VALUE")
    src, dst, key, value = sys.argv[1], sys.argv[2], sys.argv[3].encode(), sys.argv[4].encode()
    with open(src, "rb") as f:
        r = Reader(f.read())
    if r.take(4) != b"GGUF" or r.u32() != 3:
        sys.exit("gguf_set_str: not a GGUF file of version 3")
    n_tensors, n_kv = r.u64(), r.u64()
    out = bytearray(b"GGUF" + struct.pack("<IQQ", 3, n_tensors, n_kv))
    found, align = False, 32
    for _ in range(n_kv):
        start = r.pos
        name = r.string()
        vtype = r.u32()
        if name == key:
            if vtype != STRING:
                sys.exit(f"gguf_set_str: {key.decode()} is not a string")
            r.string()
            out += struct.pack("<Q", len(name)) + name + struct.pack("<I", STRING)
            out += struct.pack("<Q", len(value)) + value
            found = True
            continue
        vstart = r.pos
        r.skip_value(vtype)
        if name == b"general.alignment" and vtype == U32:
            align = struct.unpack("<I", r.data[vstart:vstart + 4])[0]
        out += r.data[start:r.pos]
    if not found:
        sys.exit(f"gguf_set_str: {key.decode()} is not in {src}")
    start = r.pos
    for _ in range(n_tensors):
        r.string()
        r.take(8 * r.u32())
        r.take(12)
    out += r.data[start:r.pos]
    data_at = -(-r.pos // align) * align
    if n_tensors:  # a file of no tensors ends with its metadata, as llama.cpp writes it
        out += bytes(-len(out) % align)
        out += r.data[data_at:]
    with open(dst, "wb") as f:
        f.write(out)


if __name__ == "__main__":
    main()
