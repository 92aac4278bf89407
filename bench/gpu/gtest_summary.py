#!/usr/bin/env python3
"""One line per gtest XML report (--gtest_output=xml:FILE): how many tests
ran, passed, failed and were skipped. Exits 1 when any test failed, when no
test passed (everything skipped is not a pass: on a machine where the device
is missing every CUDA test skips), or when a report is missing or cannot be
read, so that bench/gpu/check.sh never shows a phase as green that proved
nothing.

  gtest_summary.py NAME=FILE.xml [NAME=FILE.xml ...]
"""

import sys
import xml.etree.ElementTree as ET


def summarize(path):
    """(tests, failed, skipped, disabled, first failing test names)."""
    root = ET.parse(path).getroot()
    tests = failed = skipped = disabled = 0
    failing = []
    for case in root.iter("testcase"):
        tests += 1
        if case.get("status") == "notrun":
            disabled += 1
        elif case.find("failure") is not None or case.find("error") is not None:
            failed += 1
            failing.append(f"{case.get('classname')}.{case.get('name')}")
        elif case.find("skipped") is not None or case.get("result") == "skipped":
            skipped += 1
    return tests, failed, skipped, disabled, failing


def main(argv):
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    bad = False
    for arg in argv:
        name, _, path = arg.partition("=")
        if not path:
            name, path = path or arg, arg
        try:
            tests, failed, skipped, disabled, failing = summarize(path)
        except (OSError, ET.ParseError) as e:
            print(f"{name}: no report ({type(e).__name__}: {e})")
            bad = True
            continue
        passed = tests - failed - skipped - disabled
        verdict = "ok"
        if failed:
            verdict = "FAILED"
        elif passed == 0:
            verdict = "FAILED (nothing passed: every test skipped)"
        print(f"{name}: {tests} tests, {passed} passed, {failed} failed, "
              f"{skipped} skipped, {disabled} disabled: {verdict}")
        for test in failing[:10]:
            print(f"  failed: {test}")
        bad = bad or verdict != "ok"
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
