#!/usr/bin/env python3
"""Checkpoint round trip between stepjit and PyTorch (ctest
checkpoint.torch_roundtrip).

  torch_roundtrip.py CHECKPOINT_MLP [--python PY]

stepjit -> torch: checkpoint_mlp trains 6 batches (compiled) and saves model
and AdamW state; torch loads them (tools/torch_checkpoint.py) into the
equivalent nn.Sequential + optim.AdamW; torch and stepjit (resumed from the
file) both train 6 more batches; losses and eval logits must agree.
torch -> stepjit: torch trains 6 batches and saves; stepjit loads, gives
torch's eval logits, and both continue 6 batches in agreement.
SGD with momentum, stepjit -> torch, the same way. Also: a file stepjit
wrote, loaded into torch and saved again by the helper, holds the same
names and bits.

Tolerance: 1e-5 absolute on losses and logits after 6 continued AdamW steps
(lr 1e-2; the two libraries sum in different orders, each step's f32
rounding differences are carried into the next), 1e-5 on logits right after
a load (one forward pass); measured differences are about 1e-7.

Runs under a Python with torch and safetensors: $STEPJIT_TORCH_PYTHON, then
--python, then this interpreter; with none it prints why and exits 77
(ctest: skipped).
"""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SKIP = 77


def find_python(argv):
    candidates = [os.environ.get("STEPJIT_TORCH_PYTHON")]
    if "--python" in argv:
        candidates.append(argv[argv.index("--python") + 1])
    candidates.append(sys.executable)
    for py in candidates:
        if py and os.path.exists(py) and subprocess.run(
                [py, "-c", "import torch, safetensors"], capture_output=True).returncode == 0:
            return py
    return None


if os.environ.get("_STEPJIT_TORCH_CHILD") != "1":
    py = find_python(sys.argv)
    if py is None:
        print("SKIP: no Python with torch and safetensors found (tried $STEPJIT_TORCH_PYTHON, "
              "--python, " + sys.executable + "); set STEPJIT_TORCH_PYTHON to run this test")
        sys.exit(SKIP)
    os.execve(py, [py, os.path.abspath(__file__)] + sys.argv[1:],
              dict(os.environ, _STEPJIT_TORCH_CHILD="1"))

import tempfile  # noqa: E402

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

sys.path.insert(0, os.path.join(HERE, "..", "..", "tools"))
from torch_checkpoint import load_checkpoint, read, save_checkpoint  # noqa: E402

BINARY = sys.argv[1]
TOL, TOL_LOAD = 1e-5, 1e-5
torch.set_num_threads(1)
failures = []


def check(what, got, want, tol):
    diff = float((got.double() - want.double()).abs().max())
    ok = diff <= tol
    print(f"  {what:<46} max |diff| {diff:.2e}  (tol {tol:.0e})  {'ok' if ok else 'FAIL'}")
    if not ok:
        failures.append(what)


def model_and_opt(seed, sgd=False):
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
                                torch.nn.ReLU(), torch.nn.Linear(32, 5))
    if sgd:  # as checkpoint_mlp --sgd
        return model, torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, dampening=0.1,
                                      weight_decay=1e-3)
    return model, torch.optim.AdamW(model.parameters(), lr=1e-2, weight_decay=1e-2)


def train(model, opt, data, first, last):
    losses = []
    for b in range(first, last):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(data["x"][b]), data["y"][b])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses)


def stepjit(*args):
    out = subprocess.run([BINARY, *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"checkpoint_mlp {' '.join(args)} failed:\n{out.stdout}{out.stderr}")
    print("  " + out.stdout.strip())


with tempfile.TemporaryDirectory() as tmp:
    path = lambda name: os.path.join(tmp, name)  # noqa: E731
    gen = torch.Generator().manual_seed(0)
    data = {"x": torch.randn(12, 16, 20, generator=gen),
            "y": torch.randint(0, 5, (12, 16), generator=gen),
            "eval_x": torch.randn(8, 20, generator=gen)}
    save_file(data, path("data.safetensors"))

    print("stepjit -> torch")
    stepjit(path("data.safetensors"), "0", "6", path("a.safetensors"), "--save",
            path("ck1.safetensors"), "--compiled")
    a = load_file(path("a.safetensors"))
    model, opt = model_and_opt(123)
    load_checkpoint(path("ck1.safetensors"), model, opt)
    with torch.no_grad():
        check("torch logits after load vs stepjit's", model(data["eval_x"]), a["logits_after"],
              TOL_LOAD)
    torch_losses = train(model, opt, data, 6, 12)
    with torch.no_grad():
        torch_logits = model(data["eval_x"])
    stepjit(path("data.safetensors"), "6", "12", path("b.safetensors"), "--load",
            path("ck1.safetensors"), "--compiled")
    b = load_file(path("b.safetensors"))
    check("6 more steps: losses (torch vs stepjit)", b["losses"], torch_losses, TOL)
    check("6 more steps: eval logits (torch vs stepjit)", b["logits_after"], torch_logits, TOL)
    print(f"  losses torch  {[round(v, 5) for v in torch_losses.tolist()]}")
    print(f"  losses stepjit {[round(v, 5) for v in b['losses'].tolist()]}")

    # The helper's save of what it loaded is the file stepjit wrote.
    model, opt = model_and_opt(5)
    load_checkpoint(path("ck1.safetensors"), model, opt)
    save_checkpoint(path("ck1_again.safetensors"), model, opt)
    t1, m1 = read(path("ck1.safetensors"))
    t2, m2 = read(path("ck1_again.safetensors"))
    same = sorted(t1) == sorted(t2) and all(torch.equal(t1[k], t2[k]) for k in t1)
    print(f"  helper re-save: {len(t1)} tensors, same names and bits: {same}")
    if not same:
        failures.append("helper re-save")

    print("stepjit -> torch, SGD with momentum")
    stepjit(path("data.safetensors"), "0", "6", path("s.safetensors"), "--save",
            path("ck_sgd.safetensors"), "--sgd")
    model, opt = model_and_opt(7, sgd=True)
    load_checkpoint(path("ck_sgd.safetensors"), model, opt)
    torch_losses = train(model, opt, data, 6, 12)
    with torch.no_grad():
        torch_logits = model(data["eval_x"])
    stepjit(path("data.safetensors"), "6", "12", path("s2.safetensors"), "--load",
            path("ck_sgd.safetensors"), "--sgd", "--compiled")
    s2 = load_file(path("s2.safetensors"))
    check("6 more SGD steps: losses (torch vs stepjit)", s2["losses"], torch_losses, TOL)
    check("6 more SGD steps: eval logits (torch vs stepjit)", s2["logits_after"], torch_logits, TOL)

    print("torch -> stepjit")
    model, opt = model_and_opt(1)
    train(model, opt, data, 0, 6)
    save_checkpoint(path("ck2.safetensors"), model, opt)
    with torch.no_grad():
        logits_at_save = model(data["eval_x"])
    torch_losses = train(model, opt, data, 6, 12)
    with torch.no_grad():
        torch_logits = model(data["eval_x"])
    stepjit(path("data.safetensors"), "6", "12", path("c.safetensors"), "--load",
            path("ck2.safetensors"))
    c = load_file(path("c.safetensors"))
    check("stepjit logits after load vs torch's", c["logits_before"], logits_at_save, TOL_LOAD)
    check("6 more steps: losses (stepjit vs torch)", c["losses"], torch_losses, TOL)
    check("6 more steps: eval logits (stepjit vs torch)", c["logits_after"], torch_logits, TOL)

if failures:
    sys.exit("FAILED: " + ", ".join(failures))
print("checkpoint round trip with PyTorch: all checks passed")
