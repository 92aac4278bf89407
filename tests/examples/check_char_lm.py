#!/usr/bin/env python3
"""Runs char_lm --json and checks what a short training must reach.

Usage: check_char_lm.py FORTUNES_DIR -- char_lm ARGS...

Independently of the example, reads the fortune databases with the split
training/data/char_corpus.h documents (files in name order, skipping *.dat
and *.u8, entries split on lines holding '%', entry i to validation when
i % 10 == 9) and computes the unigram cross-entropy of the validation text
under the training text's character frequencies (nats). Checks: every run's
validation loss is clearly below it (by 10%), no compiled region runs
interpreted, and with two runs the compiled validation loss is within 2% of
the eager one.
"""
import json
import math
import os
import subprocess
import sys
from collections import Counter


def unigram_entropy(root):
    train, valid = Counter(), Counter()
    index = 0
    for name in sorted(os.listdir(root)):
        path = os.path.join(root, name)
        if os.path.islink(path) or not os.path.isfile(path) or "." in name:
            continue
        with open(path, "rb") as f:
            lines = f.read().split(b"\n")
        entry = []
        def flush():
            nonlocal index, entry
            text = b"".join(l + b"\n" for l in entry)
            if text.strip(b" \t\n"):
                (valid if index % 10 == 9 else train).update(text)
                index += 1
            entry = []
        for line in lines:
            if line == b"%":
                flush()
            else:
                entry.append(line)
        flush()
    total = sum(train.values())
    n = sum(valid.values())
    vocab = set(train) | set(valid)
    # Add-one smoothing so that a byte unseen in training has a probability.
    return -sum(c * math.log((train[b] + 1) / (total + len(vocab))) for b, c in valid.items()) / n


def main():
    root = sys.argv[1]
    cmd = sys.argv[sys.argv.index("--") + 1:]
    h = unigram_entropy(root)
    out = subprocess.run(cmd, stdout=subprocess.PIPE, check=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    runs = result["runs"]
    ok = True
    for r in runs:
        print(f"{r['mode']}: val loss {r['val_loss']:.4f} (unigram {h:.4f}), "
              f"{r['steps']} steps, {r['interpreted_regions']} interpreted")
        if not r["val_loss"] < 0.9 * h:
            print(f"FAIL: {r['mode']} validation loss is not below 0.9 x unigram entropy")
            ok = False
        if r["mode"].startswith("compiled") and r["interpreted_regions"] != 0:
            print("FAIL: a compiled region runs interpreted")
            ok = False
    if len(runs) == 2:
        e, c = runs[0]["val_loss"], runs[1]["val_loss"]
        if abs(c - e) > 0.02 * e:
            print(f"FAIL: compiled validation loss {c} is not within 2% of eager {e}")
            ok = False
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
