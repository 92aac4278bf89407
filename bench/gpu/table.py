#!/usr/bin/env python3
"""The table bench/gpu/check.sh prints: the JSON lines of `stepjit-bench
--device cuda --json` (and --bandwidth) and of bench/gpu/torch_gpu.py, as
ms/step per workload and implementation with speedup ratios; then each
row's first and last loss with the accuracy checker's verdict on the
compiled steps (STEPJIT_CHECK=N), and peak memory per step; then GB/s per
bandwidth kernel; then the test summaries, what failed or was skipped, and
a per-kernel profile when one was taken.

  table.py [--gpu TEXT] [--failures FILE] [--skips FILE] [--tests FILE]
           [--profile FILE] FILE.jsonl...
"""

import argparse
import json

COLUMNS = [("eager", "sj eager"), ("compiled", "sj comp"), ("torch_eager", "torch"),
           ("torch_compile", "t.compile"), ("torch_compile_ro", "t.comp-RO")]
BW_COLUMNS = [("eager", "sj eager"), ("compiled", "sj comp"), ("torch_eager", "torch"),
              ("torch_compile", "t.compile")]


def fmt(v, spec):
    return "-" if v is None else format(v, spec)


def ratio(num, den):
    """num / den as "1.23x", or "-" when either is missing."""
    return f"{num / den:.2f}x" if num and den else "-"


def check_verdict(r):
    """The accuracy checker's verdict on a compiled row: "ok N/N",
    "DIVERGED F of N" or "off" (no checked replay)."""
    if not r or not r.get("checks"):
        return "off"
    n, bad = r["checks"], r.get("check_failures", 0)
    return f"DIVERGED {bad} of {n}" if bad else f"ok {n}/{n}"


def lines(path):
    if not path:
        return []
    try:
        with open(path) as f:
            return [l.strip() for l in f if l.strip()]
    except OSError:
        return []


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpu", default="", help="the device, for the title")
    ap.add_argument("--failures", help="one failed phase per line")
    ap.add_argument("--skips", help="torch_gpu.py's skip lines")
    ap.add_argument("--tests", help="gtest_summary.py's lines, one per test run")
    ap.add_argument("--profile", help="a STEPJIT_PROFILE=1 summary to print last")
    ap.add_argument("jsonl", nargs="*")
    args = ap.parse_args()

    steps, rows, bandwidth, workloads = {}, {}, {}, []
    for path in args.jsonl:
        for l in lines(path):
            try:
                r = json.loads(l)
            except json.JSONDecodeError:
                continue
            if "bandwidth" in r:
                bandwidth.setdefault(r["bandwidth"], {})[r["mode"]] = r["gb_per_s"]
            elif "workload" in r:
                if r["workload"] not in workloads:
                    workloads.append(r["workload"])
                steps[(r["workload"], r["mode"])] = r["ms_per_step"]
                rows[(r["workload"], r["mode"])] = r

    print(f"ms/step on {args.gpu or 'the GPU'} (median; each step synchronized)")
    head = "".join(f"{title:>10}" for _, title in COLUMNS)
    print(f"{'workload':28}{head}{'comp/eag':>10}{'vs torch':>10}{'vs best':>10}")
    for w in workloads:
        ms = {mode: steps.get((w, mode)) for mode, _ in COLUMNS}
        best_torch = min((v for k, v in ms.items() if k.startswith("torch_compile") and v),
                         default=None)
        cells = "".join(f"{fmt(ms[mode], '10.3f'):>10}" for mode, _ in COLUMNS)
        print(f"{w:28}{cells}"
              f"{ratio(ms['eager'], ms['compiled']):>10}"
              f"{ratio(ms['torch_eager'], ms['compiled']):>10}"
              f"{ratio(best_torch, ms['compiled']):>10}")
    if not workloads:
        print("  (no workload results)")
    print("comp/eag: stepjit eager / stepjit compiled; vs torch: torch eager / stepjit compiled;"
          "\nvs best: the faster torch.compile mode / stepjit compiled (>1: stepjit is faster)")

    print()
    print("loss: first call -> last timed step (the same batches and init for stepjit's rows;"
          "\ntorch draws its own), and the accuracy checker on stepjit's compiled replays")
    print(f"{'workload':28}" + "".join(f"{title:>16}" for _, title in COLUMNS) + "  check")
    for w in workloads:
        cells = ""
        for mode, _ in COLUMNS:
            r = rows.get((w, mode))
            loss = "-"
            if r and r.get("first_loss") is not None and r.get("last_loss") is not None:
                loss = f"{r['first_loss']:.4g}->{r['last_loss']:.4g}"
            cells += f"{loss:>16}"
        print(f"{w:28}{cells}  {check_verdict(rows.get((w, 'compiled')))}")
    if not workloads:
        print("  (no workload results)")

    print()
    print("peak MB per step above the steady state (the caching allocator's allocated bytes)")
    print(f"{'workload':28}" + "".join(f"{title:>10}" for _, title in COLUMNS))
    for w in workloads:
        cells = ""
        for mode, _ in COLUMNS:
            r = rows.get((w, mode))
            peak = r.get("peak_bytes") if r else None
            cells += f"{fmt(None if peak is None else peak / 1048576, '10.1f'):>10}"
        print(f"{w:28}{cells}")

    print()
    print("bandwidth GB/s (bytes read + written / median time)")
    print(f"{'kernel':28}" + "".join(f"{title:>10}" for _, title in BW_COLUMNS))
    for kernel, by_mode in bandwidth.items():
        print(f"{kernel:28}" + "".join(f"{fmt(by_mode.get(m), '10.1f'):>10}"
                                       for m, _ in BW_COLUMNS))
    if not bandwidth:
        print("  (no bandwidth results)")

    tests = lines(args.tests)
    print()
    print("tests:" + (" none ran" if not tests else ""))
    for l in tests:
        print("  " + l)

    failures = lines(args.failures)
    skips = lines(args.skips)
    print()
    print("failed phases:" + (" none" if not failures else ""))
    for l in failures:
        print("  " + l)
    if skips:
        print("skipped peers:")
        for l in skips:
            print("  " + l)
    profile = lines(args.profile)
    if profile:
        print()
        print("profile (STEPJIT_PROFILE=1):")
        for l in profile:
            print("  " + l)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
