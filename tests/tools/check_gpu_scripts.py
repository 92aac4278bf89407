#!/usr/bin/env python3
"""Checks the GPU check's scripts (bench/gpu) on fixtures, since they run for
real only on a lent GPU:

  check_gpu_scripts.py BENCH_GPU_DIR

gtest_summary.py must pass a report with passes and no failure, and fail
one with a failure, one where every test skipped (no device: it proves
nothing), and a missing one. table.py must show each row's first and last
loss, the accuracy checker's verdict (ok, DIVERGED, off), peak memory, the
test summaries and the profile.
"""
import json
import os
import subprocess
import sys
import tempfile

CASE = '<testcase name="{name}" status="run" result="{result}" classname="CudaTest">{body}</testcase>'


def report(path, cases):
    body = "".join(CASE.format(name=n, result=r, body=b) for n, r, b in cases)
    with open(path, "w") as f:
        f.write(f'<?xml version="1.0" encoding="UTF-8"?><testsuites><testsuite name="CudaTest">'
                f"{body}</testsuite></testsuites>")


def run(*argv):
    p = subprocess.run([sys.executable, *argv], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True)
    return p.returncode, p.stdout


def expect(cond, what, output):
    if not cond:
        print(f"check_gpu_scripts: {what}\n--- output:\n{output}", file=sys.stderr)
        sys.exit(1)


def main(argv):
    scripts = argv[1]
    summary = os.path.join(scripts, "gtest_summary.py")
    table = os.path.join(scripts, "table.py")
    with tempfile.TemporaryDirectory() as d:
        ok, failing, skipped = (os.path.join(d, n) for n in ("ok.xml", "bad.xml", "skip.xml"))
        report(ok, [("A", "completed", ""), ("B", "skipped", "<skipped/>")])
        report(failing, [("A", "completed", ""), ("C", "completed", '<failure message="x"/>')])
        report(skipped, [("A", "skipped", "<skipped/>"), ("B", "skipped", "<skipped/>")])
        rc, out = run(summary, f"cuda_tests={ok}")
        expect(rc == 0 and "2 tests, 1 passed, 0 failed, 1 skipped, 0 disabled: ok" in out,
               "a passing report is not ok", out)
        rc, out = run(summary, f"cuda_tests={failing}")
        expect(rc == 1 and "1 failed" in out and "failed: CudaTest.C" in out,
               "a failing report is not a failure naming its test", out)
        rc, out = run(summary, f"cuda_tests={skipped}")
        expect(rc == 1 and "every test skipped" in out,
               "a report where every test skipped is not a failure", out)
        rc, out = run(summary, f"cuda_tests={os.path.join(d, 'missing.xml')}")
        expect(rc == 1 and "no report" in out, "a missing report is not a failure", out)

        rows = [
            dict(workload="w1", mode="eager", ms_per_step=2.0, first_loss=2.3, last_loss=1.5,
                 peak_bytes=3 * 1048576),
            dict(workload="w1", mode="compiled", ms_per_step=1.0, first_loss=2.3, last_loss=1.5,
                 peak_bytes=1048576, checks=2, check_failures=0),
            dict(workload="w2", mode="compiled", ms_per_step=4.0, first_loss=4.2, last_loss=4.0,
                 peak_bytes=0, checks=2, check_failures=1),
            dict(workload="w1", mode="torch_eager", ms_per_step=3.0, first_loss=2.31,
                 last_loss=1.6, peak_bytes=2 * 1048576),
        ]
        jsonl = os.path.join(d, "rows.jsonl")
        with open(jsonl, "w") as f:
            f.write("\n".join(json.dumps(r) for r in rows) + "\n")
        tests, profile = os.path.join(d, "tests.txt"), os.path.join(d, "profile.txt")
        with open(tests, "w") as f:
            f.write("cuda_tests: 2 tests, 1 passed, 0 failed, 1 skipped, 0 disabled: ok\n")
        with open(profile, "w") as f:
            f.write("in train_step (compiled): kernels\n  matmul [8, 8]  3 calls\n")
        rc, out = run(table, "--gpu", "a test GPU", "--tests", tests, "--profile", profile, jsonl)
        expect(rc == 0, "table.py failed", out)
        lines = out.splitlines()
        loss_w1 = next((l for l in lines if l.startswith("w1") and "->" in l), "")
        expect("2.3->1.5" in loss_w1 and "2.31->1.6" in loss_w1 and loss_w1.endswith("ok 2/2"),
               "w1's loss row lacks its losses or the checker's ok", out)
        loss_w2 = next((l for l in lines if l.startswith("w2") and "->" in l), "")
        expect(loss_w2.endswith("DIVERGED 1 of 2"), "w2's divergence is not shown", out)
        peak_w1 = [l for l in lines if l.startswith("w1") and "3.0" in l and "1.0" in l]
        expect(peak_w1, "w1's peak memory (3.0 and 1.0 MB) is not shown", out)
        expect("cuda_tests: 2 tests, 1 passed" in out, "the test summary is not shown", out)
        expect("matmul [8, 8]" in out, "the profile is not shown", out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
