#!/usr/bin/env python3
"""Runs a command that must fail: non-zero exit, within a time limit, with
output matching a pattern. Usage:
  expect_failure.py SECONDS [--no-signal] REGEX -- command args...
--no-signal: also fail if any process died of a signal (a crash, not a
clean error), as the launcher or the C library reports it.
"""
import re
import subprocess
import sys
import time


def main():
    sep = sys.argv.index("--")
    args = sys.argv[1:sep]
    no_signal = "--no-signal" in args
    args = [a for a in args if a != "--no-signal"]
    limit, pattern = float(args[0]), args[1]
    cmd = sys.argv[sep + 1:]
    start = time.monotonic()
    try:
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=limit, text=True, errors="replace")
    except subprocess.TimeoutExpired as e:
        out = e.output or ""
        if isinstance(out, bytes):
            out = out.decode(errors="replace")
        print(out)
        print(f"FAIL: still running after {limit:.0f} s (a hang)")
        return 1
    elapsed = time.monotonic() - start
    print(p.stdout)
    if p.returncode == 0:
        print("FAIL: the command succeeded; expected a failure")
        return 1
    crash = re.search(r"signal \d+|Segmentation fault|Bus error|double free|munmap_chunk|"
                      r"corrupted|Aborted \(core dumped\)|terminate called", p.stdout)
    if no_signal and (p.returncode < 0 or crash):
        print(f"FAIL: a process crashed ({crash.group(0) if crash else p.returncode})")
        return 1
    if not re.search(pattern, p.stdout):
        print(f"FAIL: no line matches /{pattern}/")
        return 1
    print(f"OK: failed with status {p.returncode} after {elapsed:.1f} s, "
          f"output matches /{pattern}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
