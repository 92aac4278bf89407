#!/usr/bin/env python3
"""Runs a tool and checks its CSV output with Python's csv module.

  check_csv.py COLUMNS [--rows N] [--numeric C1,C2] [--file PATH] -- COMMAND ARGS...

COLUMNS is the comma-separated header the CSV must start with, exactly and
in order; every row must have that many fields. --rows: exactly N data rows
(default: at least one). --numeric: those columns must hold finite numbers in
every row. --file: read the CSV from PATH (written by the command) instead of
the command's stdout. Exit status 0 when the command succeeded and the CSV
checks out; 1 otherwise, with the reason on stderr. The tools write CSV by
hand (tools/cli_output.h); this is an independent reader.
"""
import csv
import io
import math
import subprocess
import sys


def fail(message):
    print(f"check_csv: {message}", file=sys.stderr)
    sys.exit(1)


def main(argv):
    if "--" not in argv:
        fail("usage: check_csv.py COLUMNS [--rows N] [--numeric C1,C2] "
             "[--file PATH] -- COMMAND...")
    split = argv.index("--")
    options, command = argv[1:split], argv[split + 1:]
    columns = options[0].split(",")
    rows_expected, numeric, path = None, [], None
    i = 1
    while i < len(options):
        if options[i] == "--rows":
            rows_expected = int(options[i + 1])
        elif options[i] == "--numeric":
            numeric = options[i + 1].split(",")
        elif options[i] == "--file":
            path = options[i + 1]
        else:
            fail(f"unknown option {options[i]}")
        i += 2
    run = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    if run.returncode != 0:
        fail(f"{command[0]} exited with {run.returncode}")
    text = open(path, newline="").read() if path else run.stdout
    rows = list(csv.reader(io.StringIO(text, newline="")))
    if not rows:
        fail("no CSV at all")
    if rows[0] != columns:
        fail(f"header {rows[0]}, expected {columns}")
    data = rows[1:]
    if rows_expected is not None and len(data) != rows_expected:
        fail(f"{len(data)} data row(s), expected {rows_expected}")
    if not data:
        fail("a header but no data rows")
    for number, row in enumerate(data, 2):
        if len(row) != len(columns):
            fail(f"line {number}: {len(row)} fields, expected {len(columns)}: {row}")
        for column in numeric:
            value = row[columns.index(column)]
            try:
                ok = math.isfinite(float(value))
            except ValueError:
                ok = False
            if not ok:
                fail(f"line {number}: {column} is {value!r}, expected a finite number")
    print(f"check_csv: {len(data)} row(s) under {','.join(columns)}")


if __name__ == "__main__":
    main(sys.argv)
