#!/usr/bin/env python3
"""stepjit-bench --roofline: the machine line and the compiled row's roofline
keys, checked against the workload's own arithmetic.

  check_roofline.py STEPJIT_BENCH

Runs mlp784_adamw_b128 (784-512-512-10, batch 128, AdamW) with --amp bf16
--roofline --json and checks that
  * the first line gives positive machine limits;
  * the compiled row's GEMM FLOPs per step (gemm_gflops x gemm_ms) equal the
    step's matmuls counted here: forward and weight gradients of the three
    layers, input gradients of the last two (the batch needs none);
  * floor_ms is those FLOPs at the bf16 GEMM rate plus one pass over the
    AdamW state (28 bytes per parameter, 2 more for the bf16 weight copy) at
    the triad bandwidth, and the percentages and ratio follow from the row.
Exit 0 on success, 1 with the reason on stderr.
"""
import json
import math
import subprocess
import sys


def fail(message):
    print(f"check_roofline: {message}", file=sys.stderr)
    sys.exit(1)


def close(a, b, rel=1e-6):
    return math.isclose(a, b, rel_tol=rel, abs_tol=1e-12)


def main(argv):
    if len(argv) != 2:
        fail("usage: check_roofline.py STEPJIT_BENCH")
    cmd = [argv[1], "--workload", "mlp784_adamw_b128", "--amp", "bf16",
           "--steps", "3", "--warmup", "1", "--roofline", "--json"]
    out = subprocess.run(cmd, stdout=subprocess.PIPE, text=True, timeout=600)
    if out.returncode != 0:
        fail(f"{' '.join(cmd)} exited {out.returncode}")
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.strip()]
    if not lines or lines[0].get("machine") != "cpu":
        fail(f"the first line is not the machine's limits: {lines[:1]}")
    m = lines[0]
    for key in ("fma_f32_gflops", "dp_bf16_gflops", "triad_gb_per_s",
                "gemm_f32_gflops", "gemm_bf16_gflops"):
        if not m.get(key, 0) > 0:
            fail(f"machine {key} = {m.get(key)}, expected > 0")
    rows = {r["mode"]: r for r in lines[1:]}
    if "gemm_ms" in rows.get("eager", {}):
        fail("the eager row has roofline keys; only compiled replays are profiled")
    c = rows.get("compiled")
    if c is None:
        fail(f"no compiled row in {lines}")

    batch, widths = 128, [784, 512, 512, 10]
    layers = list(zip(widths[:-1], widths[1:]))
    flops = sum(2 * batch * i * o * 2 for i, o in layers)  # forward, dW
    flops += sum(2 * batch * i * o for i, o in layers[1:])  # dX
    params = sum(i * o + o for i, o in layers)
    got_flops = c["gemm_gflops"] * c["gemm_ms"] * 1e6
    if not close(got_flops, flops):
        fail(f"GEMM FLOPs per step {got_flops:.6g}, the step has {flops}")
    floor = flops / (m["gemm_bf16_gflops"] * 1e6) + \
        30.0 * params / (m["triad_gb_per_s"] * 1e6)
    if not close(c["floor_ms"], floor):
        fail(f"floor_ms {c['floor_ms']}, expected {floor}")
    if not close(c["ratio_to_floor"], c["ms_per_step"] / floor):
        fail(f"ratio_to_floor {c['ratio_to_floor']}, expected ms/floor")
    if not close(c["gemm_pct_peak"],
                 100 * c["gemm_gflops"] / m["dp_bf16_gflops"]):
        fail(f"gemm_pct_peak {c['gemm_pct_peak']} is not against the bf16 peak")
    if not close(c["fused_pct_triad"],
                 100 * c["fused_gb_per_s"] / m["triad_gb_per_s"]):
        fail(f"fused_pct_triad {c['fused_pct_triad']} is not against the triad")
    for key in ("gemm_ms", "fused_ms", "fused_gb_per_s"):
        if not c[key] > 0:
            fail(f"compiled {key} = {c[key]}, expected > 0")
    print(f"check_roofline: OK: {flops / 1e6:.1f} MFLOP of GEMMs per step, "
          f"floor {floor:.3f} ms, {c['ratio_to_floor']:.2f}x")


if __name__ == "__main__":
    main(sys.argv)
