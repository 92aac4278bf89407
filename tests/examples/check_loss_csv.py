#!/usr/bin/env python3
"""Runs fashion_mnist with --loss-csv and checks the file it writes.

  check_loss_csv.py FILE STEPS -- FASHION_MNIST ARGS...

The command must train --mode both for STEPS steps with --loss-csv FILE. The
file must be CSV with the header mode,step,loss and rows 1..STEPS for
"eager", then for "compiled"; every loss finite and positive; the first
step's loss near ln(10) (a freshly initialized 10-class classifier, within
0.25); and every compiled loss within 1e-4 (relative) of the eager loss of
the same step (same seed, same batches).
"""
import csv
import math
import subprocess
import sys


def fail(message):
    print(f"check_loss_csv: {message}", file=sys.stderr)
    sys.exit(1)


def main(argv):
    split = argv.index("--")
    path, steps = argv[1], int(argv[2])
    command = argv[split + 1:]
    run = subprocess.run(command, stdout=subprocess.DEVNULL)
    if run.returncode != 0:
        fail(f"{command[0]} exited with {run.returncode}")
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if rows[0] != ["mode", "step", "loss"]:
        fail(f"header {rows[0]}, expected mode,step,loss")
    losses = {}
    for number, (mode, step, loss) in enumerate(rows[1:], 2):
        value = float(loss)
        if not math.isfinite(value) or value <= 0:
            fail(f"line {number}: loss {loss}")
        losses.setdefault(mode, []).append((int(step), value))
    if list(losses) != ["eager", "compiled"]:
        fail(f"modes {list(losses)}, expected eager then compiled")
    for mode, series in losses.items():
        if [s for s, _ in series] != list(range(1, steps + 1)):
            fail(f"{mode}: steps {[s for s, _ in series]}, expected 1..{steps}")
    first = losses["eager"][0][1]
    if abs(first - math.log(10)) > 0.25:
        fail(f"first eager loss {first}, expected ln(10) = 2.3026 within 0.25")
    for (step, eager), (_, compiled) in zip(losses["eager"], losses["compiled"]):
        if abs(compiled - eager) > 1e-4 * abs(eager):
            fail(f"step {step}: compiled loss {compiled}, eager {eager}")
    print(f"check_loss_csv: {steps} steps per mode, first loss {first:.4f}, "
          f"last eager {losses['eager'][-1][1]:.4f}")


if __name__ == "__main__":
    main(sys.argv)
