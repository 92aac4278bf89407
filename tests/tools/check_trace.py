#!/usr/bin/env python3
"""Runs a program with --profile TRACE.json and checks the Chrome trace it
writes, with Python's json module (independent of the llvm::json writer).

  check_trace.py TRACE.json STEPS -- COMMAND ARGS...

COMMAND must train STEPS steps of one compiled step named train_step (its
first call warms up eagerly, the second traces) and print explain()'s
"kernels/step N" on stdout. Checks: every event is a complete "X" event
(or "M" metadata) with finite times; on each track, spans nest (any two
are disjoint or one holds the other); there are STEPS - 2 compiled step
spans, each holding exactly N kernel spans, and no kernel span is outside
one; every step has a data-loader wait; the summary is on stderr.
Exit status 0 when all hold, else 1 with the reason on stderr.
"""
import json
import math
import re
import subprocess
import sys


def fail(message):
    print(f"check_trace: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) < 5 or sys.argv[3] != "--":
        fail("usage: check_trace.py TRACE.json STEPS -- COMMAND ARGS...")
    path, steps, command = sys.argv[1], int(sys.argv[2]), sys.argv[4:]
    run = subprocess.run(command + ["--profile", path], capture_output=True,
                         text=True, check=False)
    if run.returncode != 0:
        fail(f"{command[0]} exited {run.returncode}:\n{run.stderr}")
    if "stepjit profile" not in run.stderr or "peaks:" not in run.stderr:
        fail(f"no profiler summary on stderr:\n{run.stderr}")
    match = re.search(r"kernels/step (\d+)", run.stdout)
    if match is None:
        fail(f"no 'kernels/step N' on stdout:\n{run.stdout}")
    kernels_per_step = int(match.group(1))

    with open(path, encoding="utf-8") as f:
        trace = json.load(f)
    spans = []
    for e in trace["traceEvents"]:
        if e.get("ph") == "M":
            continue
        for key in ("name", "cat", "ph", "ts", "dur", "pid", "tid", "args"):
            if key not in e:
                fail(f"event {e} has no '{key}'")
        if e["ph"] != "X":
            fail(f"event {e} is not a complete event")
        if not (math.isfinite(e["ts"]) and math.isfinite(e["dur"])
                and e["dur"] >= 0):
            fail(f"event {e} has a bad time")
        begin = round(e["ts"] * 1000)  # nanoseconds
        spans.append((e["tid"], begin, begin + round(e["dur"] * 1000),
                      e["cat"], e["name"]))

    for tid in {s[0] for s in spans}:
        track = sorted((s for s in spans if s[0] == tid),
                       key=lambda s: (s[1], -s[2]))
        open_spans = []
        for s in track:
            while open_spans and open_spans[-1][2] <= s[1]:
                open_spans.pop()
            if open_spans and s[2] > open_spans[-1][2]:
                fail(f"track {tid}: {s} overlaps {open_spans[-1]} partially")
            open_spans.append(s)

    compiled = [s for s in spans if s[4] == "train_step (compiled)"]
    if len(compiled) != steps - 2:
        fail(f"{len(compiled)} compiled step spans, expected {steps - 2}")
    kernels = [s for s in spans if s[3] == "kernel"]
    for step in compiled:
        inside = [k for k in kernels
                  if k[0] == step[0] and step[1] <= k[1] and k[2] <= step[2]]
        if len(inside) != kernels_per_step:
            fail(f"a compiled step holds {len(inside)} kernel spans, "
                 f"expected kernels/step {kernels_per_step}")
    if len(kernels) != kernels_per_step * len(compiled):
        fail(f"{len(kernels)} kernel spans in all, expected "
             f"{kernels_per_step * len(compiled)}: some are outside the steps")
    waits = [s for s in spans if s[3] == "data"]
    if len(waits) < steps:
        fail(f"{len(waits)} data-loader waits for {steps} steps")
    print(f"check_trace: {len(spans)} spans, {len(compiled)} compiled steps "
          f"of {kernels_per_step} kernels each, {len(waits)} data waits")


if __name__ == "__main__":
    main()
