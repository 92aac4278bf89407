#!/usr/bin/env python3
"""Checks an example's --ddp training against the same run in one process.

  check_ddp.py fashion_mnist|char_lm WORKDIR --world N [--fortunes DIR]
      [--launch LAUNCHER...]
      -- EXAMPLE ARGS...

Runs EXAMPLE ARGS --json in one process without --ddp (the reference), then
LAUNCHER EXAMPLE ARGS --ddp --json (no LAUNCHER: a world of one). Both runs
see the same global batches: the DistributedSampler deals a shuffled epoch
out to the ranks so that their batches together are the single process's,
and char_lm's ranks split each drawn batch. So the two runs must agree up
to the order of float sums (relative 1e-3 on losses, 0.5 percentage points
on accuracy). Also checks that stdout holds exactly one JSON line (only
rank 0 prints) that reports world size N and the per-rank batch, and that
the run learned: fashion_mnist's test accuracy is above 70%, char_lm's
validation loss is below the unigram entropy of the validation text
(check_char_lm.py). Under --mode both each mode's run is compared. For
fashion_mnist in one mode, --save goes to an empty WORKDIR and
must leave exactly one file (rank 0's) whose tensors are the plain model's
("model.0.weight", no "module." prefix); the file then loads into a plain
run (--load) that resumes with the accuracy the --ddp run ended with.
"""
import json
import os
import shutil
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from check_char_lm import unigram_entropy  # noqa: E402

failures = []


def check(ok, message):
    print(("ok: " if ok else "FAIL: ") + message, flush=True)
    if not ok:
        failures.append(message)


def run(cmd):
    print("$ " + " ".join(cmd), flush=True)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=300)
    if p.returncode != 0:
        print(p.stdout)
        sys.exit(f"FAIL: exit status {p.returncode}")
    lines = [l for l in p.stdout.splitlines() if l.strip()]
    return lines


def only_json(lines, what):
    check(len(lines) == 1, f"{what}: one line on stdout (found {len(lines)})")
    return json.loads(lines[-1])


def close(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def safetensors_names(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return [k for k in json.loads(f.read(n)) if k != "__metadata__"]


def main():
    args = sys.argv[1:]
    sep = args.index("--")
    cmd = args[sep + 1:]
    kind, workdir = args[0], args[1]
    world = int(args[args.index("--world") + 1])
    launch = args[args.index("--launch") + 1:sep] if "--launch" in args else []
    batch = int(cmd[cmd.index("--batch-size") + 1])

    ref = json.loads(run(cmd + ["--json"])[-1])
    ddp_args = ["--ddp", "--json"]
    save = kind == "fashion_mnist" and "both" not in cmd  # --save needs one mode
    if save:
        shutil.rmtree(workdir, ignore_errors=True)
        os.makedirs(workdir)
        saved = os.path.join(workdir, "ddp.safetensors")
        ddp_args += ["--save", saved]
    got = only_json(run(launch + cmd + ddp_args), "--ddp")

    # fashion_mnist --mode both prints {"eager": ..., "compiled": ...},
    # char_lm {"runs": [...]}: compare each mode's run.
    if kind == "fashion_mnist":
        pairs = ([(ref[m], got[m]) for m in ("eager", "compiled")] if "eager" in ref
                 else [(ref, got)])
        acc, loss_key = "test_accuracy", "final_loss"
    else:
        pairs = list(zip(ref["runs"], got["runs"]))
        acc, loss_key = None, "val_loss"
    for r, d in pairs:
        mode = d["mode"]
        check(d["world_size"] == world, f"{mode}: world size {d['world_size']}, expected {world}")
        check(d["per_rank_batch"] * world == batch,
              f"{mode}: per-rank batch {d['per_rank_batch']} x {world} ranks = --batch-size {batch}")
        check(d["steps"] == r["steps"], f"{mode}: {d['steps']} steps, as one process ({r['steps']})")
        check(d["samples_per_s"] > 0 and d["buckets"] >= 1,
              f"{mode}: {d['samples_per_s']:.1f} samples/s, {d['buckets']} bucket(s)")
        check(close(d["final_loss"], r["final_loss"], 1e-3),
              f"{mode}: train loss {d['final_loss']:.6f}, one process {r['final_loss']:.6f} "
              "(rel 1e-3)")
        key = acc or loss_key
        check(close(d[key], r[key], 1e-3) if acc is None else abs(d[key] - r[key]) <= 0.005,
              f"{mode}: {key} {d[key]:.6f}, one process {r[key]:.6f}")
    if kind == "fashion_mnist":
        for _, d in pairs:
            check(d[acc] > 0.70, f"{d['mode']}: test accuracy {100 * d[acc]:.2f}% > 70%")
    d = pairs[-1][1]
    if save:
        files = sorted(os.listdir(workdir))
        check(files == ["ddp.safetensors"], f"--save wrote {files} (one file, rank 0's)")
        names = safetensors_names(saved)
        check("model.0.weight" in names and not any("module." in n for n in names),
              f"checkpoint holds the plain model's tensors ({len(names)} tensors)")
        # A plain run from the checkpoint: the accuracy after one more step
        # is close to the one the --ddp run ended with (a step moves it a
        # little; a model that did not load would be at ~10%).
        resumed = only_json(run([cmd[0], "--load", saved, "--max-steps", "1", "--quiet", "--json"]),
                            "--load")
        check(abs(resumed[acc] - d[acc]) <= 0.03,
              f"--load into a plain model: accuracy {100 * resumed[acc]:.2f}% after one more "
              f"step, {100 * d[acc]:.2f}% when saved (within 3 points)")
    if kind == "char_lm":
        h = unigram_entropy(args[args.index("--fortunes") + 1])
        for _, d in pairs:
            check(d["val_loss"] < h,
                  f"{d['mode']}: val loss {d['val_loss']:.4f} < unigram entropy {h:.4f}")
            check(d["interpreted_regions"] == 0, f"{d['mode']}: no region runs interpreted")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
