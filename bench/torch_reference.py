#!/usr/bin/env python3
"""PyTorch (and optionally JAX) peers of tools/stepjit-bench's workloads.

Same four MLP training steps (forward, cross-entropy, backward, optimizer),
f32 on the CPU with 2 threads, a rotating pool of 16 random batches drawn with
a fixed seed (the same scheme as stepjit-bench; the values differ because the
generators differ, which does not matter for timing). Prints one JSON object
per line per workload and mode with the keys of `stepjit-bench --json`:
workload, mode, dtype, ms_per_step, kernels_per_step, compile_ms_cold,
compile_ms_warm, peak_bytes.

Modes:
  torch_eager    plain PyTorch; kernels_per_step null, compile 0.
  torch_compile  torch.compile of the whole step (PyTorch 2.x only);
                 compile_ms_cold = first call's time (compile + one step),
                 compile_ms_warm = a second torch.compile of the same step
                 after torch._dynamo.reset() (the inductor disk cache may hit).
  jax_jit        jax.jit + optax, when jax and optax import (XLA uses all
                 cores of the machine; on the 2-core machine that is 2).
peak_bytes is always null: PyTorch and XLA allocate tensors in C++, which
tracemalloc does not see, so no comparable number is available.
A mode that cannot run prints one "skip: ..." line on stderr.
"""

import argparse
import json
import statistics
import sys
import time

WORKLOADS = {
    "mlp784_adamw_b128": dict(widths=[784, 512, 512, 10], batch=128, opt="adamw", lr=1e-3),
    "mlp784_sgd_b128": dict(widths=[784, 512, 512, 10], batch=128, opt="sgd", lr=1e-2),
    "tiny_mlp_adamw_b32": dict(widths=[64, 64, 64, 64, 10], batch=32, opt="adamw", lr=1e-3),
    "mlp1024x3_adamw_b512": dict(widths=[1024, 1024, 1024, 1024, 10], batch=512, opt="adamw",
                                 lr=1e-3),
}
ALL_MODES = ["torch_eager", "torch_compile", "jax_jit"]
POOL = 16
DATA_SEED = 1234
# stepjit's AdamW defaults, which match torch.optim.AdamW's.
BETAS, EPS, WEIGHT_DECAY = (0.9, 0.999), 1e-8, 1e-2


def skip(mode, why):
    print(f"skip: {mode}: {why}", file=sys.stderr, flush=True)


AMP = "f32"  # --amp: "bf16" runs the torch modes' forward under CPU autocast


def result(name, mode, ms, cold=0.0, warm=0.0):
    return dict(workload=name, mode=mode, dtype=AMP, ms_per_step=round(ms, 4),
                kernels_per_step=None, compile_ms_cold=round(cold, 3),
                compile_ms_warm=round(warm, 3), peak_bytes=None)


def time_steps(call, pool, warmup, steps, sync=lambda out: None):
    """Warms up, then returns the median ms of `steps` individually timed calls."""
    i = 0
    for _ in range(warmup):
        sync(call(*pool[i % POOL]))
        i += 1
    ms = []
    for _ in range(steps):
        x, y = pool[i % POOL]
        i += 1
        t0 = time.perf_counter()
        sync(call(x, y))
        ms.append(1e3 * (time.perf_counter() - t0))
    return statistics.median(ms)


def torch_setup(w, device="cpu", bf16=None):
    """Model, optimizer, step and batch pool of workload `w` on `device`;
    bf16 autocast when `bf16` (default: --amp bf16)."""
    import torch
    if bf16 is None:
        bf16 = AMP == "bf16"
    torch.manual_seed(0)
    layers = []
    for i in range(len(w["widths"]) - 1):
        if i > 0:
            layers.append(torch.nn.ReLU())
        layers.append(torch.nn.Linear(w["widths"][i], w["widths"][i + 1]))
    model = torch.nn.Sequential(*layers).to(device)
    if w["opt"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=w["lr"], momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=w["lr"], betas=BETAS, eps=EPS,
                                weight_decay=WEIGHT_DECAY)
    gen = torch.Generator().manual_seed(DATA_SEED)
    pool = [(torch.randn(w["batch"], w["widths"][0], generator=gen).to(device),
             torch.randint(0, w["widths"][-1], (w["batch"],), generator=gen).to(device))
            for _ in range(POOL)]

    def step(x, y):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return step, pool


def run_torch_eager(name, w, args):
    step, pool = torch_setup(w)
    return result(name, "torch_eager", time_steps(step, pool, args.warmup, args.steps))


def run_torch_compile(name, w, args):
    import torch
    step, pool = torch_setup(w)
    torch._dynamo.reset()
    fast = torch.compile(step)
    t0 = time.perf_counter()
    fast(*pool[0])
    cold = 1e3 * (time.perf_counter() - t0)
    ms = time_steps(fast, pool, args.warmup, args.steps)
    torch._dynamo.reset()
    again = torch.compile(step)
    t0 = time.perf_counter()
    again(*pool[1])
    warm = 1e3 * (time.perf_counter() - t0)
    return result(name, "torch_compile", ms, cold, warm)


def run_jax_jit(name, w, args):
    import jax
    import jax.numpy as jnp
    import optax

    key = jax.random.PRNGKey(0)
    params = []
    for i in range(len(w["widths"]) - 1):
        key, k1, k2 = jax.random.split(key, 3)
        fan_in, fan_out = w["widths"][i], w["widths"][i + 1]
        bound = 1.0 / fan_in ** 0.5
        params.append((jax.random.uniform(k1, (fan_in, fan_out), jnp.float32, -bound, bound),
                       jax.random.uniform(k2, (fan_out,), jnp.float32, -bound, bound)))
    if w["opt"] == "sgd":
        tx = optax.sgd(w["lr"], momentum=0.9)
    else:
        tx = optax.adamw(w["lr"], b1=BETAS[0], b2=BETAS[1], eps=EPS, weight_decay=WEIGHT_DECAY)

    def loss_fn(p, x, y):
        h = x
        for i, (wt, b) in enumerate(p):
            if i > 0:
                h = jax.nn.relu(h)
            h = h @ wt + b
        return optax.softmax_cross_entropy_with_integer_labels(h, y).mean()

    def train_step(p, s, x, y):
        loss, g = jax.value_and_grad(loss_fn)(p, x, y)
        updates, s = tx.update(g, s, p)
        return optax.apply_updates(p, updates), s, loss

    rng = jax.random.PRNGKey(DATA_SEED)
    pool = []
    for _ in range(POOL):
        rng, kx, ky = jax.random.split(rng, 3)
        pool.append((jax.random.normal(kx, (w["batch"], w["widths"][0]), jnp.float32),
                     jax.random.randint(ky, (w["batch"],), 0, w["widths"][-1])))
    state = {"p": params, "s": tx.init(params)}

    def make(jitted):
        def call(x, y):
            state["p"], state["s"], loss = jitted(state["p"], state["s"], x, y)
            return loss
        return call

    fast = make(jax.jit(train_step, donate_argnums=(0, 1)))
    t0 = time.perf_counter()
    fast(*pool[0]).block_until_ready()
    cold = 1e3 * (time.perf_counter() - t0)
    ms = time_steps(fast, pool, args.warmup, args.steps, sync=lambda out: out.block_until_ready())
    again = make(jax.jit(train_step, donate_argnums=(0, 1)))
    t0 = time.perf_counter()
    again(*pool[1]).block_until_ready()
    warm = 1e3 * (time.perf_counter() - t0)
    return result(name, "jax_jit", ms, cold, warm)


def available_modes(modes):
    """Returns the runnable subset of `modes`, printing a skip line for each other."""
    ok = []
    try:
        import torch
        torch.set_num_threads(2)
        torch_ok = True
    except ImportError as e:
        torch_ok = False
        torch_why = f"PyTorch is not importable ({e})"
    for mode in modes:
        if mode.startswith("torch") and not torch_ok:
            skip(mode, torch_why)
        elif mode == "torch_compile" and not hasattr(torch, "compile"):
            skip(mode, f"torch {torch.__version__} has no torch.compile (needs PyTorch 2.x)")
        elif mode == "jax_jit":
            try:
                import jax  # noqa: F401
                import optax  # noqa: F401
                ok.append(mode)
            except ImportError as e:
                skip(mode, f"jax/optax not importable ({e})")
        else:
            ok.append(mode)
    return ok


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", choices=sorted(WORKLOADS), help="run only this workload")
    ap.add_argument("--steps", type=int, default=50, help="timed steps (default 50)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (default 5)")
    ap.add_argument("--modes", default=",".join(ALL_MODES),
                    help="comma-separated subset of " + ",".join(ALL_MODES))
    ap.add_argument("--amp", choices=["f32", "bf16"], default="f32",
                    help="bf16: torch modes run the forward under torch.autocast('cpu', "
                         "bfloat16); jax_jit is skipped")
    ap.add_argument("--json", action="store_true",
                    help="JSON lines (the default output; accepted for symmetry)")
    args = ap.parse_args()
    global AMP
    AMP = args.amp
    if AMP != "f32" and "jax_jit" in args.modes:
        args.modes = ",".join(m for m in args.modes.split(",") if m != "jax_jit")
        skip("jax_jit", f"--amp {AMP}: the JAX reference is f32 only")
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    modes = [m for m in args.modes.split(",") if m]
    bad = [m for m in modes if m not in ALL_MODES]
    if bad:
        ap.error(f"unknown mode(s) {','.join(bad)}; known: {','.join(ALL_MODES)}")
    runners = {"torch_eager": run_torch_eager, "torch_compile": run_torch_compile,
               "jax_jit": run_jax_jit}
    modes = available_modes(modes)
    for name, w in WORKLOADS.items():
        if args.workload and name != args.workload:
            continue
        for mode in modes:
            try:
                r = runners[mode](name, w, args)
            except Exception as e:  # a peer failing must not hide the others
                skip(mode, f"{name} failed: {type(e).__name__}: {e}")
                continue
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
