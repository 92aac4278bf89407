#!/usr/bin/env python3
"""PyTorch on CUDA: the GPU peers of `stepjit-bench --device cuda`.

The same training steps as bench/torch_reference.py (forward, cross-entropy,
backward, optimizer; torch.manual_seed(0) init, AdamW with stepjit's
defaults or SGD with momentum 0.9, a rotating pool of 16 random batches
drawn on the CPU with a fixed seed and copied to the GPU): its MLPs and
GPT language models, plus the GPU-sized ones, each with its forward under
bf16 autocast: mlp4096x4_adamw_b4096_bf16 and gpt_d512_l8_t256_b32_bf16
(vocab 114, width 512, 8 heads, 8 layers, context 256, batch 32; attention
is F.scaled_dot_product_attention, which picks a fused flash or
memory-efficient kernel on the GPU).
Every step is followed by torch.cuda.synchronize() before the host clock
stops, as stepjit-bench does; ms_per_step is the median over the timed steps.
f32 matmuls stay f32 (PyTorch's default, allow_tf32 off), as in stepjit.

Prints one JSON object per line with stepjit-bench's keys (workload, mode,
dtype, device, ms_per_step, kernels_per_step, compile_ms_cold,
compile_ms_warm, peak_bytes, first_loss, last_loss). Modes, all three for one
workload before the next (in the order --workload gives), so that a time
limit still leaves whole rows:
  torch_eager       plain PyTorch.
  torch_compile     torch.compile of the whole step (mode "default");
                    compile_ms_cold = the first call (compile + one step).
  torch_compile_ro  the same with mode="reduce-overhead" (CUDA graphs).
peak_bytes = torch.cuda.max_memory_allocated() above the steady state over
one step; compile_ms_warm is not measured here (it would double the compile
time on a short lease). first_loss is the loss of the first call (warmup
included), last_loss that of the last timed step, both read after timing.

--bandwidth instead times a copy (dst.copy_(src)) and y = relu(x * 1.5 +
0.25) eager and torch.compile'd over --numel f32 elements, with the keys of
`stepjit-bench --bandwidth --json` (bandwidth, mode, device, numel, bytes,
ms, gb_per_s); bytes counts one read and one write per element.
A mode that cannot run prints one "skip: ..." line on stderr.
"""

import argparse
import json
import os
import statistics
import sys
import time

# The CPU comparison's workloads and model setup (bench/torch_reference.py),
# plus the GPU-sized ones (bench/workloads.cc's CudaWorkloads()). The GPT's
# GEMMs are about 1.3 TFLOP per step (25M parameters x 6 x 8192 tokens, plus
# the attention products), near the MLP's 1.6.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import torch_reference  # noqa: E402

WORKLOADS = dict(torch_reference.WORKLOADS)
WORKLOADS["mlp4096x4_adamw_b4096_bf16"] = dict(widths=[4096] * 5 + [10], batch=4096,
                                               opt="adamw", lr=1e-3, amp="bf16")
WORKLOADS["gpt_d512_l8_t256_b32_bf16"] = dict(
    gpt=dict(vocab=114, d_model=512, heads=8, context=256, layers=8), batch=32, opt="adamw",
    lr=1e-3, amp="bf16")
ALL_MODES = ["torch_eager", "torch_compile", "torch_compile_ro"]
COMPILE_MODE = {"torch_compile": "default", "torch_compile_ro": "reduce-overhead"}


def skip(mode, why):
    print(f"skip: {mode}: {why}", file=sys.stderr, flush=True)


def emit(row):
    print(json.dumps(row), flush=True)


def time_calls(call, warmup, runs, pool=((),), results=None):
    """Median ms of `runs` calls, each followed by a device synchronize; call i
    takes the arguments pool[i % len(pool)]. With `results` (a list), the
    first call's and the last timed call's return values are appended to it."""
    import torch
    first = None
    for i in range(warmup):
        out = call(*pool[i % len(pool)])
        if i == 0:
            first = out
    torch.cuda.synchronize()
    ms = []
    out = None
    for i in range(warmup, warmup + runs):
        t0 = time.perf_counter()
        out = call(*pool[i % len(pool)])
        torch.cuda.synchronize()
        ms.append(1e3 * (time.perf_counter() - t0))
        if first is None:
            first = out
    if results is not None:
        results.extend([first, out])
    return statistics.median(ms)


def setup(w):
    return torch_reference.torch_setup(w, device="cuda", bf16=w.get("amp") == "bf16")


def run_workload(name, w, mode, args):
    import torch
    step, pool = setup(w)
    cold = 0.0
    if mode != "torch_eager":
        torch._dynamo.reset()
        step = torch.compile(step, mode=COMPILE_MODE[mode])
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        cold_loss = step(*pool[0])
        torch.cuda.synchronize()
        cold = 1e3 * (time.perf_counter() - t0)
    losses = []
    ms = time_calls(step, args.warmup, args.steps, pool, losses)
    if mode != "torch_eager":
        losses[0] = cold_loss  # the first call was the compiling one
    first_loss, last_loss = (float(l.detach().float().cpu()) for l in losses)
    del losses
    steady = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    step(*pool[1])
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated() - steady
    emit(dict(workload=name, mode=mode, dtype=w.get("amp", "f32"), device="cuda",
              ms_per_step=round(ms, 4), kernels_per_step=None, compile_ms_cold=round(cold, 3),
              compile_ms_warm=0.0, peak_bytes=peak, first_loss=first_loss,
              last_loss=last_loss))


def run_bandwidth(args):
    import torch
    n = args.numel
    nbytes = 2 * n * 4
    gen = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(n, device="cuda", generator=gen)  # never time zeros
    dst = torch.empty_like(x)

    def elementwise(t):
        return torch.relu(t * 1.5 + 0.25)

    rows = [("copy", "torch_eager", lambda: dst.copy_(x)),
            ("relu_axpb", "torch_eager", lambda: elementwise(x))]
    try:
        fused = torch.compile(elementwise)
        fused(x)
        rows.append(("relu_axpb", "torch_compile", lambda: fused(x)))
    except Exception as e:  # keep the eager numbers
        skip("torch_compile", f"bandwidth failed: {type(e).__name__}: {e}")
    for kernel, mode, call in rows:
        ms = time_calls(call, 3, args.steps)
        emit(dict(bandwidth=kernel, mode=mode, device="cuda", numel=n, bytes=nbytes,
                  ms=round(ms, 4), gb_per_s=round(nbytes / (ms * 1e6), 2)))


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", metavar="NAME[,NAME...]",
                    help="run only these workloads, in this order (default: all); known: "
                         + ", ".join(WORKLOADS))
    ap.add_argument("--steps", type=int, default=50, help="timed steps or runs (default 50)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    ap.add_argument("--modes", default=",".join(ALL_MODES),
                    help="comma-separated subset of " + ",".join(ALL_MODES))
    ap.add_argument("--bandwidth", action="store_true", help="time copy and elementwise instead")
    ap.add_argument("--numel", type=int, default=1 << 26,
                    help="elements for --bandwidth (default 64M)")
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.numel < 1:
        ap.error("--steps and --numel must be >= 1 and --warmup >= 0")
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in ALL_MODES]
    if bad:
        ap.error(f"unknown mode(s) {','.join(bad)}; known: {','.join(ALL_MODES)}")
    names = [n for n in (args.workload or "").split(",") if n] or list(WORKLOADS)
    bad = [n for n in names if n not in WORKLOADS]
    if bad:
        ap.error(f"unknown workload(s) {','.join(bad)}; known: {', '.join(WORKLOADS)}")
    try:
        import torch
    except ImportError as e:
        skip(",".join(modes), f"PyTorch is not importable ({e})")
        return 1
    if not torch.cuda.is_available():
        skip(",".join(modes), f"torch {torch.__version__} sees no CUDA device")
        return 1
    if args.bandwidth:
        run_bandwidth(args)
        return 0
    if not hasattr(torch, "compile"):
        for m in [m for m in modes if m != "torch_eager"]:
            skip(m, f"torch {torch.__version__} has no torch.compile (needs PyTorch 2.x)")
        modes = [m for m in modes if m == "torch_eager"]
    for name in names:
        for mode in modes:
            try:
                run_workload(name, WORKLOADS[name], mode, args)
            except Exception as e:  # a peer failing must not hide the others
                skip(mode, f"{name} failed: {type(e).__name__}: {e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
