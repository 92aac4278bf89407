#!/usr/bin/env python3
"""Writes the fuzzers' seed corpus under fuzz/corpus/<target>/.

  fuzz/make_corpus.py

ir: every graph of tests/ir/*.ir (split at `// -----`, comments dropped).
idx: small valid IDX files of each element type and rank, plain (first byte
even) and gzipped by the fuzzer (first byte odd), and a few broken ones.
checkpoint: small safetensors files (each dtype, 0-d and empty tensors,
metadata, space padding) and broken ones (short, bad JSON, holes).
kernel_cache: stored-then-damaged inputs (first byte odd) with payloads of a
few sizes and damage at the header and in the payload, and raw files.
"""
import json
import os
import pathlib
import struct

root = pathlib.Path(__file__).resolve().parent.parent
out = root / "fuzz" / "corpus"


def write(target, name, data):
    d = out / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data)


for path in sorted((root / "tests" / "ir").glob("*.ir")):
    text = path.read_text()
    for i, chunk in enumerate(text.split("// -----")):
        lines = [l for l in chunk.splitlines() if not l.strip().startswith("//")]
        body = "\n".join(lines).strip()
        if body.startswith("graph"):
            write("ir", f"{path.stem}_{i}.ir", (body + "\n").encode())

# Empty shapes whose other dims overflow strides (a 0 dim among 2^62 ones),
# in params, results and view attributes.
write("ir", "empty_huge_param.ir",
      b"graph @g(%x: f32[4, 4611686018427387904, 0] input) {\n"
      b"  %y = neg %x : f32[4, 4611686018427387904, 0]\n  return %y\n}\n")
write("ir", "empty_huge_reshape.ir",
      b"graph @g(%x: f32[0, 4] input) {\n"
      b"  %y = reshape %x {shape = [0, 4611686018427387904, 4]} : "
      b"f32[0, 4611686018427387904, 4]\n"
      b"  return %y\n}\n")


def idx(type_code, dims, payload):
    return bytes([0, 0, type_code, len(dims)]) + b"".join(
        struct.pack(">I", d) for d in dims) + payload


for mode in (0, 1):
    write("idx", f"u8_2x3_{mode}", bytes([mode]) + idx(0x08, [2, 3], bytes(range(6))))
    write("idx", f"i32_4_{mode}", bytes([mode]) + idx(0x0C, [4], struct.pack(">4i", 1, -2, 3, -4)))
    write("idx", f"f64_1x1x2_{mode}", bytes([mode]) + idx(0x0E, [1, 1, 2], struct.pack(">2d", 0.5, -1)))
    write("idx", f"empty_{mode}", bytes([mode]) + idx(0x08, [0, 28, 28], b""))
    write("idx", f"short_{mode}", bytes([mode]) + idx(0x08, [4, 4], bytes(10)))
    write("idx", f"huge_{mode}", bytes([mode]) + idx(0x08, [0xFFFFFFFF, 0xFFFFFFFF], bytes(16)))

for n in (0, 1, 64, 1000):
    payload = bytes((i * 131) % 256 for i in range(n))
    write("kernel_cache", f"clean_{n}", bytes([1, n & 0xFF, n >> 8]) + payload)
    write("kernel_cache", f"header_{n}", bytes([1, n & 0xFF, n >> 8]) + payload + bytes([9, 0x40]))
    write("kernel_cache", f"payload_{n}", bytes([1, n & 0xFF, n >> 8]) + payload + bytes([200, 1, 3]))
write("kernel_cache", "raw_magic", b"\x00SJKERNEL\x01\x00\x00\x00" + bytes(76))
write("kernel_cache", "raw_empty", b"\x00")


def safetensors(entries, metadata=None, pad=0):
    """entries: (name, dtype, shape, bytes); offsets laid out in order."""
    header, data = {}, b""
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, payload in entries:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(data), len(data) + len(payload)]}
        data += payload
    text = json.dumps(header).encode() + b" " * pad
    return struct.pack("<Q", len(text)) + text + data


write("checkpoint", "f32_2x2", safetensors([("w", "F32", [2, 2], struct.pack("<4f", 1, -2, 3.5, 0))]))
write("checkpoint", "mlp", safetensors(
    [("0.weight", "F32", [3, 2], struct.pack("<6f", *range(6))),
     ("0.bias", "F32", [3], struct.pack("<3f", 0.5, 0, -1)),
     ("optimizer.state.0.step", "F32", [], struct.pack("<f", 3))],
    metadata={"format": "pt", "optimizer.param_groups": '[{"lr":0.001,"params":[0]}]'}, pad=5))
write("checkpoint", "dtypes", safetensors(
    [("a", "F16", [2], b"\x00\x3c\x00\xc0"), ("b", "BF16", [1], b"\x80\x3f"),
     ("c", "F64", [1], struct.pack("<d", 2.25)), ("d", "I64", [2], struct.pack("<2q", -1, 7)),
     ("e", "I32", [1], struct.pack("<i", 9)), ("f", "BOOL", [3], bytes([1, 0, 1])),
     ("g", "U8", [2], bytes([200, 3])), ("h", "F32", [0, 4], b"")]))
write("checkpoint", "empty", safetensors([]))
write("checkpoint", "hole", safetensors([("w", "F32", [1], b"\0" * 4)])[:-4] + b"\0" * 8)
write("checkpoint", "short", safetensors([("w", "F32", [2], b"\0" * 8)])[:-3])
write("checkpoint", "bad_json", struct.pack("<Q", 10) + b'{"w": {"dt')
