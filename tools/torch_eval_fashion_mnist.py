#!/usr/bin/env python3
"""Loads an examples/fashion_mnist --save checkpoint into the equivalent
PyTorch model and optimizer (tools/torch_checkpoint.py) and prints the test
accuracy PyTorch computes.

  torch_eval_fashion_mnist.py FILE.safetensors [--data-dir DIR]

The inputs are prepared as stepjit's loader does (training/data/idx.h):
pixels / 255, normalized with mean 0.2860 and std 0.3530, in f32.
"""
import argparse
import gzip
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_checkpoint import load_checkpoint, read  # noqa: E402


def idx(path):
    with gzip.open(path) as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


parser = argparse.ArgumentParser()
parser.add_argument("checkpoint")
parser.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
args = parser.parse_args()

model = torch.nn.Sequential(torch.nn.Linear(784, 512), torch.nn.ReLU(), torch.nn.Linear(512, 512),
                            torch.nn.ReLU(), torch.nn.Linear(512, 10))
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
# The scaler's state is there when the run used one (--amp f16).
has_scaler = any(k.startswith("scaler.") for k in read(args.checkpoint)[0])
scaler = torch.amp.GradScaler("cpu") if has_scaler else None
load_checkpoint(args.checkpoint, model, optimizer, scaler)

images = idx(os.path.join(args.data_dir, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784)
labels = torch.from_numpy(idx(os.path.join(args.data_dir, "t10k-labels-idx1-ubyte.gz")).astype(np.int64))
scale, shift = np.float32(1 / 255) / np.float32(0.3530), -np.float32(0.2860) / np.float32(0.3530)
x = torch.from_numpy(images.astype(np.float32) * scale + shift)
with torch.no_grad():
    correct = int((model(x).argmax(1) == labels).sum())
step = int(next(iter(optimizer.state.values()))["step"])
print(f"torch: loaded {args.checkpoint}: AdamW step {step}, lr {optimizer.param_groups[0]['lr']:.6g}"
      + (f", scaler scale {scaler.get_scale():g}" if scaler else ""))
print(f"torch: test accuracy {100 * correct / len(labels):.2f}% ({correct}/{len(labels)})")
