#!/usr/bin/env python3
"""Runs a command that must fail: non-zero exit, within a time limit, with
output matching a pattern. Usage:
  expect_failure.py SECONDS REGEX -- command args...
"""
import re
import subprocess
import sys
import time


def main():
    sep = sys.argv.index("--")
    limit, pattern = float(sys.argv[1]), sys.argv[2]
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
    if not re.search(pattern, p.stdout):
        print(f"FAIL: no line matches /{pattern}/")
        return 1
    print(f"OK: failed with status {p.returncode} after {elapsed:.1f} s, "
          f"output matches /{pattern}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
