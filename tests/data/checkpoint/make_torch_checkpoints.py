#!/usr/bin/env python3
"""Writes the PyTorch-made checkpoints tests/training/torch_checkpoint_test.cc
reads without PyTorch, and the numbers PyTorch computed from them.

  python tests/data/checkpoint/make_torch_checkpoints.py   # needs torch, safetensors

torch_mlp.safetensors    Sequential(Linear(4,8), ReLU, Linear(8,3)) and its
                         AdamW after 3 steps (tools/torch_checkpoint.py layout)
torch_dtypes.safetensors one small tensor of each dtype, by safetensors.torch
torch_cnn.safetensors    a CNN with two BatchNorm2d layers (conv, BN, ReLU,
                         max-pool, strided conv, BN, ReLU, 1x1 conv with bias,
                         global average pool, flatten, linear) and its AdamW
                         after 3 training
                         steps: parameters, and the buffers running_mean,
                         running_var and num_batches_tracked
expected.txt             one line per array, "name v1 v2 ...": eval input
                         and torch's logits; the next batch, its loss and
                         the parameters after one more AdamW step
                         ("after.<name>"); the dtype tensors' values
                         ("dtype.<name>", integers exactly); for the CNN,
                         "cnn.*": the eval-mode input and logits, the next
                         training batch, its loss, and every parameter and
                         buffer after one more AdamW step
"""
import pathlib
import sys

import torch
from safetensors.torch import save_file

here = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(here.parent.parent.parent / "tools"))
from torch_checkpoint import save_checkpoint  # noqa: E402

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
opt = torch.optim.AdamW(model.parameters(), lr=0.05, weight_decay=0.01)
for _ in range(3):
    x = torch.randn(4, 4)
    y = torch.randint(0, 3, (4,))
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
save_checkpoint(str(here / "torch_mlp.safetensors"), model, opt)

eval_x = torch.randn(2, 4)
with torch.no_grad():
    logits = model(eval_x)
next_x = torch.randn(4, 4)
next_y = torch.randint(0, 3, (4,))
opt.zero_grad()
loss = torch.nn.functional.cross_entropy(model(next_x), next_y)
loss.backward()
opt.step()


def values(t):
    return [float(v) for v in t.detach().double().flatten()]


dtypes = {
    "f32": torch.tensor([[1.5, -2.0], [3.25, 1e-8]], dtype=torch.float32),
    "f64": torch.tensor([0.1, -1e300], dtype=torch.float64),
    "f16": torch.tensor([0.5, -65504.0, 6e-8], dtype=torch.float16),
    "bf16": torch.tensor([1.0, -3.0e38, 0.0078125], dtype=torch.bfloat16),
    "i64": torch.tensor([-(2**62) - 1, 7], dtype=torch.int64),
    "i32": torch.tensor([[-7], [2**30]], dtype=torch.int32),
    "bool": torch.tensor([True, False, True]),
    "scalar": torch.tensor(4.25),
}
save_file(dtypes, str(here / "torch_dtypes.safetensors"), metadata={"made_by": "torch"})

# A CNN with batch norm: buffers in the checkpoint, eval with the running
# statistics, and a training step that updates them.
nn = torch.nn
# (No bias on a conv before batch norm: its gradient is rounding noise,
# which AdamW would scale up to full steps that no two libraries share.)
cnn = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1, bias=False), nn.BatchNorm2d(4), nn.ReLU(),
                    nn.MaxPool2d(2), nn.Conv2d(4, 6, 3, stride=2, padding=1, bias=False),
                    nn.BatchNorm2d(6), nn.ReLU(), nn.Conv2d(6, 5, 1), nn.AdaptiveAvgPool2d(1),
                    nn.Flatten(), nn.Linear(5, 3))
cnn_opt = torch.optim.AdamW(cnn.parameters(), lr=0.05, weight_decay=0.01)
for _ in range(3):
    x = torch.randn(4, 1, 8, 8)
    y = torch.randint(0, 3, (4,))
    cnn_opt.zero_grad()
    torch.nn.functional.cross_entropy(cnn(x), y).backward()
    cnn_opt.step()
save_checkpoint(str(here / "torch_cnn.safetensors"), cnn, cnn_opt)
cnn.eval()
cnn_eval_x = torch.randn(2, 1, 8, 8)
with torch.no_grad():
    cnn_logits = cnn(cnn_eval_x)
cnn.train()
cnn_next_x = torch.randn(4, 1, 8, 8)
cnn_next_y = torch.randint(0, 3, (4,))
cnn_opt.zero_grad()
cnn_loss = torch.nn.functional.cross_entropy(cnn(cnn_next_x), cnn_next_y)
cnn_loss.backward()
cnn_opt.step()

lines = [f"# made by make_torch_checkpoints.py with torch {torch.__version__}",
         "eval_x " + " ".join(map(repr, values(eval_x))),
         "logits " + " ".join(map(repr, values(logits))),
         "next_x " + " ".join(map(repr, values(next_x))),
         "next_y " + " ".join(str(int(v)) for v in next_y),
         f"next_loss {float(loss.detach())!r}"]
lines += [f"after.{k} " + " ".join(map(repr, values(v))) for k, v in model.state_dict().items()]
lines += ["cnn.eval_x " + " ".join(map(repr, values(cnn_eval_x))),
          "cnn.logits " + " ".join(map(repr, values(cnn_logits))),
          "cnn.next_x " + " ".join(map(repr, values(cnn_next_x))),
          "cnn.next_y " + " ".join(str(int(v)) for v in cnn_next_y),
          f"cnn.next_loss {float(cnn_loss.detach())!r}"]
lines += [f"cnn.after.{k} " + " ".join(map(repr, values(v)))
          for k, v in cnn.state_dict().items()]
for k, t in dtypes.items():
    vals = values(t) if t.is_floating_point() else [int(v) for v in t.flatten()]
    lines.append(f"dtype.{k} " + " ".join(map(repr, vals)))
(here / "expected.txt").write_text("\n".join(lines) + "\n")
print("wrote", ", ".join(p.name for p in sorted(here.glob("*.safetensors"))), "and expected.txt")
