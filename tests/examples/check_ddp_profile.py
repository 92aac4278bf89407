#!/usr/bin/env python3
"""Checks the traces of fashion_mnist --ddp --profile on two ranks.

  check_ddp_profile.py TRACE.json STEPS BUCKETS -- COMMAND ARGS...

COMMAND trains STEPS steps (compiled, split into BUCKETS gradient buckets)
on two ranks; tools/check_trace.py runs it with --profile TRACE.json and
checks rank 0's trace. Rank 1's must be next to it
(TRACE.rank1.json), and in both every bucket's all_reduce is a "comm" span
"all_reduce avg bucket B of ... (comm)" once per step (eager warm-up, trace
and replays alike) on the communication thread's track, and the waits for
them ("dist wait") are on another track.
"""
import collections
import json
import os
import re
import subprocess
import sys


def fail(message):
    print(f"check_ddp_profile: {message}", file=sys.stderr)
    sys.exit(1)


def main():
    if len(sys.argv) < 6 or sys.argv[4] != "--":
        fail("usage: check_ddp_profile.py TRACE.json STEPS BUCKETS -- COMMAND ARGS...")
    trace, steps, buckets = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    root, ext = os.path.splitext(trace)
    rank1 = f"{root}.rank1{ext}"
    for path in (trace, rank1):
        if os.path.exists(path):
            os.remove(path)
    check_trace = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools",
                               "check_trace.py")
    if subprocess.run([sys.executable, check_trace, trace, str(steps), "--"] +
                      sys.argv[5:]).returncode != 0:
        fail("rank 0's trace failed check_trace.py")
    for rank, path in ((0, trace), (1, rank1)):
        if not os.path.exists(path):
            fail(f"rank {rank} wrote no trace at {path}")
        with open(path) as f:
            events = [e for e in json.load(f)["traceEvents"] if e.get("cat") == "comm"]
        calls = collections.Counter()
        comm_tracks, wait_tracks = set(), set()
        for e in events:
            m = re.fullmatch(r"all_reduce avg bucket (\d+) of f32\[\d+\] \(comm\)", e["name"])
            if m:
                calls[int(m.group(1))] += 1
                comm_tracks.add(e["tid"])
            elif e["name"] == "dist wait":
                wait_tracks.add(e["tid"])
        if sorted(calls) != list(range(buckets)):
            fail(f"rank {rank}: bucket all_reduce spans for buckets {sorted(calls)}, "
                 f"expected 0..{buckets - 1}")
        if any(n != steps for n in calls.values()):
            fail(f"rank {rank}: all_reduce spans per bucket {dict(calls)}, expected {steps} each")
        if len(comm_tracks) != 1 or not wait_tracks or comm_tracks & wait_tracks:
            fail(f"rank {rank}: collectives on tracks {comm_tracks}, waits on {wait_tracks}; "
                 "expected one communication track apart from the waiting threads")
        print(f"rank {rank}: {buckets} buckets x {steps} all_reduce spans on track "
              f"{comm_tracks.pop()}, {sum(e['name'] == 'dist wait' for e in events)} waits")


if __name__ == "__main__":
    main()
