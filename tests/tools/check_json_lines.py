#!/usr/bin/env python3
"""Runs a tool and checks that its stdout is JSON, one object per line.

  check_json_lines.py KEYS [--nested K1,K2] -- COMMAND ARGS...

KEYS is a comma-separated list of the keys every object (or, with --nested,
the objects under each of K1, K2) must have, exactly; numbers must be finite.
Exit status 0 when the command succeeded and every line checks out; 1
otherwise, with the reason on stderr. The tools' --json output is written
with llvm::json; this is an independent parser (Python's json module).
"""
import json
import math
import subprocess
import sys


def fail(message):
    print(f"check_json_lines: {message}", file=sys.stderr)
    sys.exit(1)


def check_object(obj, keys, where):
    if not isinstance(obj, dict):
        fail(f"{where}: not a JSON object: {obj!r}")
    if set(obj) != keys:
        fail(f"{where}: keys {sorted(obj)}, expected {sorted(keys)}")
    for key, value in obj.items():
        if isinstance(value, float) and not math.isfinite(value):
            fail(f"{where}: {key} is {value}")


def main(argv):
    if "--" not in argv:
        fail("usage: check_json_lines.py KEYS [--nested K1,K2] -- COMMAND...")
    split = argv.index("--")
    options, command = argv[1:split], argv[split + 1:]
    keys = set(options[0].split(","))
    nested = options[2].split(",") if options[1:2] == ["--nested"] else []
    run = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        fail(f"{command[0]} exited with {run.returncode}")
    lines = run.stdout.splitlines()
    if not lines:
        fail(f"{command[0]} printed nothing on stdout")
    for number, line in enumerate(lines, 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            fail(f"line {number} is not JSON ({e}): {line}")
        if nested:
            for key in nested:
                check_object(obj.get(key), keys, f"line {number}, {key}")
        else:
            check_object(obj, keys, f"line {number}")
    print(f"check_json_lines: {len(lines)} line(s) of JSON with keys "
          f"{','.join(sorted(keys))}")


if __name__ == "__main__":
    main(sys.argv)
