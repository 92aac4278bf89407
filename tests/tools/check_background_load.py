#!/usr/bin/env python3
"""stepjit-bench --background-load N: N busy children run while it times, and
none is left once it exits.

  check_background_load.py STEPJIT_BENCH

Runs a two-step benchmark with --background-load 2 --json and checks, while
it runs, that two children of it burn CPU, and afterwards that the JSON
lines report background_load 2 and that no child is left behind. Exit 0 on
success, 1 with the reason on stderr.
"""
import json
import os
import subprocess
import sys
import time


def fail(message):
    print(f"check_background_load: {message}", file=sys.stderr)
    sys.exit(1)


def children(pid):
    """PIDs whose parent is `pid` (from /proc)."""
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry))
    return out


def main(argv):
    if len(argv) != 2:
        fail("usage: check_background_load.py STEPJIT_BENCH")
    cmd = [argv[1], "--workload", "tiny_mlp_adamw_b32", "--steps", "400",
           "--warmup", "1", "--background-load", "2", "--json"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
    seen = set()
    deadline = time.time() + 120
    while proc.poll() is None and time.time() < deadline:
        seen.update(children(proc.pid))
        time.sleep(0.05)
    out, _ = proc.communicate(timeout=300)
    if proc.returncode != 0:
        fail(f"{' '.join(cmd)} exited with {proc.returncode}")
    # Two spinning children plus the compile probes (popen'd shells).
    if len(seen) < 2:
        fail(f"saw {len(seen)} children while it ran, expected at least 2")
    left = [p for p in seen if os.path.exists(f"/proc/{p}") and
            open(f"/proc/{p}/stat").read().split()[2] != "Z"]
    if left:
        fail(f"children still running after exit: {left}")
    lines = [json.loads(l) for l in out.splitlines() if l.strip()]
    if len(lines) != 2:
        fail(f"expected 2 JSON lines (eager, compiled), got {len(lines)}")
    for obj in lines:
        if obj.get("background_load") != 2:
            fail(f"background_load is {obj.get('background_load')!r}, expected 2")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
