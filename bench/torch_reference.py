#!/usr/bin/env python3
"""PyTorch (and optionally JAX) peers of tools/stepjit-bench's workloads.

The same training steps (forward, cross-entropy, backward, optimizer) as
stepjit-bench, f32 on the CPU with 2 threads, on a rotating pool of 16 random
batches drawn with a fixed seed (the same scheme as stepjit-bench; the values
differ because the generators differ, which does not matter for timing):
  mlp*            MLPs (Linear + ReLU) on random f32 inputs and class labels.
  cnn_adamw_b128  bench/workloads.cc's MakeCnn on random [B, 1, 28, 28] images:
                  Conv2d(1, 32, 3, padding 1), ReLU, MaxPool2d(2),
                  Conv2d(32, 64, 3, padding 1), ReLU, MaxPool2d(2), Flatten,
                  Linear(3136, 128), ReLU, Linear(128, 10); PyTorch's default
                  init (stepjit's nn::Conv2d and nn::Linear use the same).
                  jax_jit writes it with lax.conv_general_dilated and
                  reduce_window (NCHW).
  resnet_adamw_b128 bench/workloads.cc's MakeResnet on the same images: a
                  3x3 conv (no bias), BatchNorm2d and ReLU stem of 32
                  channels; torchvision-style BasicBlocks of 32, 64 (stride 2)
                  and 128 (stride 2) channels (a strided 1x1 conv and
                  BatchNorm2d on the shortcut where the shape changes); a
                  global average pool and Linear(128, 10). Batch norm in
                  training mode updates its running statistics every step
                  (jax_jit carries them as state).
  gpt_dD_lL_tT_bB stepjit's nn::GPT (training/nn/transformer.h): token and
                  learned position embeddings, L pre-LN blocks (LayerNorm,
                  causal multi-head self-attention with one fused QKV
                  projection and an output projection, residual; LayerNorm,
                  Linear(D, 4D), exact GELU, Linear(4D, D), residual), a final
                  LayerNorm and an untied vocabulary head with bias; the loss
                  is the mean cross-entropy of the next token over all B x T
                  positions. Batches are random token ids [B, T + 1]: the
                  first T are the inputs, the last T the targets. Init as
                  stepjit's: embeddings N(0, 1), in_proj xavier-uniform with
                  zero bias, out_proj's bias zero, other Linears
                  U(+-1/sqrt(fan_in)), LayerNorms 1 and 0. The torch modes
                  call F.scaled_dot_product_attention(is_causal=True); jax_jit
                  writes the masked softmax out with jnp ops.
AdamW (all workloads but mlp784_sgd_b128) has stepjit's defaults, weight
decay on every parameter. Prints one JSON object per line per workload and
mode with the keys of `stepjit-bench --json`: workload, mode, dtype,
ms_per_step, kernels_per_step, compile_ms_cold, compile_ms_warm, peak_bytes.

Modes:
  torch_eager    plain PyTorch; kernels_per_step null, compile 0.
  torch_compile  torch.compile of the whole step (PyTorch 2.x only);
                 compile_ms_cold = first call's time (compile + one step),
                 compile_ms_warm = a second torch.compile of the same step
                 after torch._dynamo.reset() (the inductor disk cache may hit).
  jax_jit        jax.jit + optax, when jax and optax import (XLA uses all
                 cores of the machine; on the 2-core machine that is 2).
--amp bf16 runs the torch modes' forward and loss under
torch.autocast("cpu", bfloat16); jax_jit is f32 only and is skipped then.
peak_bytes is always null: PyTorch and XLA allocate tensors in C++, which
tracemalloc does not see, so no comparable number is available.
A mode that cannot run prints one "skip: ..." line on stderr.
"""

import argparse
import json
import statistics
import subprocess
import sys
import time

WORKLOADS = {
    "mlp784_adamw_b128": dict(widths=[784, 512, 512, 10], batch=128, opt="adamw", lr=1e-3),
    "mlp784_sgd_b128": dict(widths=[784, 512, 512, 10], batch=128, opt="sgd", lr=1e-2),
    "tiny_mlp_adamw_b32": dict(widths=[64, 64, 64, 64, 10], batch=32, opt="adamw", lr=1e-3),
    "mlp1024x3_adamw_b512": dict(widths=[1024, 1024, 1024, 1024, 10], batch=512, opt="adamw",
                                 lr=1e-3),
    # bench/workloads.cc's GptShape: vocab, d_model, heads, context, layers.
    "gpt_d64_l1_t32_b16": dict(gpt=dict(vocab=65, d_model=64, heads=4, context=32, layers=1),
                               batch=16, opt="adamw", lr=1e-3),
    "gpt_d128_l2_t64_b16": dict(gpt=dict(vocab=65, d_model=128, heads=4, context=64, layers=2),
                                batch=16, opt="adamw", lr=1e-3),
    # examples/char_lm's default model and batch, with a vocabulary of 114.
    "gpt_d128_l4_t128_b32": dict(gpt=dict(vocab=114, d_model=128, heads=4, context=128,
                                          layers=4),
                                 batch=32, opt="adamw", lr=1e-3),
    # Shapes that change every call (bench/workloads.cc's `sizes`): each
    # batch of the pool has its own sequence length or batch size.
    "gpt_d128_l2_tvar_b16": dict(gpt=dict(vocab=65, d_model=128, heads=4, context=128,
                                          layers=2),
                                 batch=16, opt="adamw", lr=1e-3,
                                 sizes=[72, 8, 128, 40, 96, 16, 112, 56, 24, 88, 64, 120, 32,
                                        104, 48, 80]),
    "cnn_adamw_b128": dict(cnn=True, classes=10, batch=128, opt="adamw", lr=1e-3),
    "resnet_adamw_b128": dict(cnn=True, resnet=True, classes=10, batch=128, opt="adamw",
                              lr=1e-3),
    "mlp784_adamw_bvar": dict(widths=[784, 512, 512, 10], batch=256, opt="adamw", lr=1e-3,
                              sizes=[37, 201, 1, 129, 84, 256, 13, 170, 58, 243, 112, 7, 190,
                                     65, 146, 29]),
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


def time_steps(call, pool, warmup, steps, sync=lambda out: None, varies=False):
    """Warms up, then returns the median ms of `steps` individually timed calls.

    With `varies` (a workload whose sizes change every call), as
    stepjit-bench: one more turn of the pool in the warmup, so that every
    size is compiled first, whole turns timed (`steps` rounded up to POOL)
    and their mean returned."""
    if varies:
        warmup += POOL
        steps = -(-steps // POOL) * POOL
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
    return statistics.mean(ms) if varies else statistics.median(ms)


def torch_gpt(g):
    """stepjit's nn::GPT of shape `g` (training/nn/transformer.h) as a torch
    nn.Module, with the same init scheme and parameter count."""
    import torch
    from torch import nn
    F = nn.functional

    class Attention(nn.Module):
        """nn::MultiheadAttention(causal): one [3D, D] QKV projection."""

        def __init__(self, d, heads):
            super().__init__()
            self.heads = heads
            self.in_proj_weight = nn.Parameter(nn.init.xavier_uniform_(torch.empty(3 * d, d)))
            self.in_proj_bias = nn.Parameter(torch.zeros(3 * d))
            self.out_proj = nn.Linear(d, d)
            nn.init.zeros_(self.out_proj.bias)

        def forward(self, x):
            b, t, d = x.shape
            qkv = F.linear(x, self.in_proj_weight, self.in_proj_bias)
            q, k, v = (z.reshape(b, t, self.heads, d // self.heads).transpose(1, 2)
                       for z in qkv.split(d, dim=-1))
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            return self.out_proj(y.transpose(1, 2).reshape(b, t, d))

    class Block(nn.Module):
        """nn::TransformerBlock: pre-LN attention and GELU MLP, dropout 0."""

        def __init__(self, d, heads):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.attn = Attention(d, heads)
            self.ln2 = nn.LayerNorm(d)
            self.fc1 = nn.Linear(d, 4 * d)
            self.fc2 = nn.Linear(4 * d, d)

        def forward(self, x):
            x = x + self.attn(self.ln1(x))
            return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self, vocab, d_model, heads, context, layers):
            super().__init__()
            self.tok = nn.Embedding(vocab, d_model)  # N(0, 1), as stepjit's
            self.pos = nn.Embedding(context, d_model)
            self.blocks = nn.ModuleList(Block(d_model, heads) for _ in range(layers))
            self.ln_f = nn.LayerNorm(d_model)
            self.head = nn.Linear(d_model, vocab)  # GPTOptions: tie_weights false
            self.register_buffer("positions", torch.arange(context), persistent=False)

        def forward(self, tokens):
            x = self.tok(tokens) + self.pos(self.positions[:tokens.shape[1]])
            for block in self.blocks:
                x = block(x)
            return self.head(self.ln_f(x))

    return GPT(**g)


def torch_resnet():
    """bench/workloads.cc's MakeResnet (nn::BasicBlock is torchvision's)."""
    import torch
    nn = torch.nn

    class BasicBlock(nn.Module):
        def __init__(self, cin, cout, stride=1):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(
                    nn.Conv2d(cin, cout, 1, stride=stride, bias=False), nn.BatchNorm2d(cout))

        def forward(self, x):
            r = self.bn2(self.conv2(torch.relu(self.bn1(self.conv1(x)))))
            return torch.relu(r + (x if self.downsample is None else self.downsample(x)))

    return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32),
                         nn.ReLU(), BasicBlock(32, 32), BasicBlock(32, 64, 2),
                         BasicBlock(64, 128, 2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                         nn.Linear(128, 10))


def torch_setup(w, device="cpu", bf16=None):
    """Model, optimizer, step and batch pool of workload `w` on `device`;
    bf16 autocast when `bf16` (default: --amp bf16)."""
    import torch
    if bf16 is None:
        bf16 = AMP == "bf16"
    torch.manual_seed(0)
    if "gpt" in w:
        model = torch_gpt(w["gpt"])
    elif w.get("resnet"):
        model = torch_resnet()
    elif w.get("cnn"):
        nn = torch.nn
        model = nn.Sequential(nn.Conv2d(1, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Conv2d(32, 64, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                              nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                              nn.Linear(128, 10))
    else:
        layers = []
        for i in range(len(w["widths"]) - 1):
            if i > 0:
                layers.append(torch.nn.ReLU())
            layers.append(torch.nn.Linear(w["widths"][i], w["widths"][i + 1]))
        model = torch.nn.Sequential(*layers)
    model = model.to(device)
    if w["opt"] == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=w["lr"], momentum=0.9)
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=w["lr"], betas=BETAS, eps=EPS,
                                weight_decay=WEIGHT_DECAY)
    gen = torch.Generator().manual_seed(DATA_SEED)
    sizes = w.get("sizes")
    if "gpt" in w:
        # Random tokens; the targets are the inputs shifted by one position.
        lengths = sizes or [w["gpt"]["context"]] * POOL
        seqs = [torch.randint(0, w["gpt"]["vocab"], (w["batch"], t + 1), generator=gen)
                for t in lengths]
        pool = [(s[:, :-1].contiguous().to(device), s[:, 1:].contiguous().to(device))
                for s in seqs]
    elif w.get("cnn"):
        pool = [(torch.randn(w["batch"], 1, 28, 28, generator=gen).to(device),
                 torch.randint(0, w["classes"], (w["batch"],), generator=gen).to(device))
                for _ in range(POOL)]
    else:
        batches = sizes or [w["batch"]] * POOL
        pool = [(torch.randn(b, w["widths"][0], generator=gen).to(device),
                 torch.randint(0, w["widths"][-1], (b,), generator=gen).to(device))
                for b in batches]

    def step(x, y):
        opt.zero_grad()
        with torch.autocast(device, dtype=torch.bfloat16, enabled=bf16):
            out = model(x)
            if out.dim() == 3:  # the GPT's [B, T, vocab] as rows
                out, y = out.reshape(-1, out.shape[-1]), y.reshape(-1)
            loss = torch.nn.functional.cross_entropy(out, y)
        loss.backward()
        opt.step()
        return loss

    return step, pool


def run_torch_eager(name, w, args):
    step, pool = torch_setup(w)
    return result(name, "torch_eager", time_steps(step, pool, args.warmup, args.steps,
                                                  varies=bool(w.get("sizes"))))


def run_torch_compile(name, w, args):
    import torch
    step, pool = torch_setup(w)
    torch._dynamo.reset()
    fast = torch.compile(step)
    t0 = time.perf_counter()
    fast(*pool[0])
    cold = 1e3 * (time.perf_counter() - t0)
    ms = time_steps(fast, pool, args.warmup, args.steps, varies=bool(w.get("sizes")))
    torch._dynamo.reset()
    again = torch.compile(step)
    t0 = time.perf_counter()
    again(*pool[1])
    warm = 1e3 * (time.perf_counter() - t0)
    return result(name, "torch_compile", ms, cold, warm)


def jax_mlp(w):
    """Initial params, loss(params, x, y) and batch pool of MLP workload `w`."""
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

    def loss_fn(p, x, y):
        h = x
        for i, (wt, b) in enumerate(p):
            if i > 0:
                h = jax.nn.relu(h)
            h = h @ wt + b
        return optax.softmax_cross_entropy_with_integer_labels(h, y).mean()

    rng = jax.random.PRNGKey(DATA_SEED)
    pool = []
    for _ in range(POOL):
        rng, kx, ky = jax.random.split(rng, 3)
        pool.append((jax.random.normal(kx, (w["batch"], w["widths"][0]), jnp.float32),
                     jax.random.randint(ky, (w["batch"],), 0, w["widths"][-1])))
    return params, loss_fn, pool


def jax_uniform_init(seed):
    """uniform(shape, fan_in): PyTorch's default U(+-1/sqrt(fan_in)) init,
    each call drawing from the next split of PRNGKey(seed)."""
    import jax
    import jax.numpy as jnp

    key = jax.random.PRNGKey(seed)

    def uniform(shape, fan_in):
        nonlocal key
        key, k = jax.random.split(key)
        bound = 1.0 / fan_in ** 0.5
        return jax.random.uniform(k, shape, jnp.float32, -bound, bound)

    return uniform


def jax_image_pool(w):
    """POOL batches of random [batch, 1, 28, 28] images and class labels."""
    import jax
    import jax.numpy as jnp

    rng = jax.random.PRNGKey(DATA_SEED)
    pool = []
    for _ in range(POOL):
        rng, kx, ky = jax.random.split(rng, 3)
        pool.append((jax.random.normal(kx, (w["batch"], 1, 28, 28), jnp.float32),
                     jax.random.randint(ky, (w["batch"],), 0, w["classes"])))
    return pool


def jax_cnn(w):
    """The CNN of torch_setup as pure functions (NCHW, OIHW), PyTorch's
    default init, with its loss and batch pool."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax import lax

    uniform = jax_uniform_init(0)

    params = {"c1": (uniform((32, 1, 3, 3), 9), uniform((32,), 9)),
              "c2": (uniform((64, 32, 3, 3), 288), uniform((64,), 288)),
              "l1": (uniform((3136, 128), 3136), uniform((128,), 3136)),
              "l2": (uniform((128, 10), 128), uniform((10,), 128))}

    def conv(p, x):
        y = lax.conv_general_dilated(x, p[0], (1, 1), ((1, 1), (1, 1)),
                                     dimension_numbers=("NCHW", "OIHW", "NCHW"))
        return y + p[1][None, :, None, None]

    def pool2(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")

    def loss_fn(p, x, y):
        h = pool2(jax.nn.relu(conv(p["c1"], x)))
        h = pool2(jax.nn.relu(conv(p["c2"], h)))
        h = h.reshape(h.shape[0], -1)
        h = jax.nn.relu(h @ p["l1"][0] + p["l1"][1])
        logits = h @ p["l2"][0] + p["l2"][1]
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    pool = jax_image_pool(w)
    return params, loss_fn, pool


def jax_resnet(w):
    """torch_resnet as pure functions: (params, batch statistics), PyTorch's
    default init (kaiming-uniform convs, BN weight 1 and bias 0), batch norm
    with batch statistics and a momentum-0.1 update of the running ones."""
    import jax
    import jax.numpy as jnp
    import optax
    from jax import lax

    uniform = jax_uniform_init(0)

    def conv_p(cin, cout, k):
        return uniform((cout, cin, k, k), cin * k * k)

    def bn_p(c):
        return {"w": jnp.ones((c,)), "b": jnp.zeros((c,))}

    def bn_s(c):
        return {"mean": jnp.zeros((c,)), "var": jnp.ones((c,))}

    blocks = [(32, 32, 1), (32, 64, 2), (64, 128, 2)]
    params = {"stem": conv_p(1, 32, 3), "stem_bn": bn_p(32), "blocks": [],
              "fc": (uniform((128, 10), 128), uniform((10,), 128))}
    stats = {"stem_bn": bn_s(32), "blocks": []}
    for cin, cout, stride in blocks:
        p = {"conv1": conv_p(cin, cout, 3), "bn1": bn_p(cout), "conv2": conv_p(cout, cout, 3),
             "bn2": bn_p(cout)}
        st = {"bn1": bn_s(cout), "bn2": bn_s(cout)}
        if stride != 1 or cin != cout:
            p["down"], p["down_bn"], st["down_bn"] = conv_p(cin, cout, 1), bn_p(cout), bn_s(cout)
        params["blocks"].append(p)
        stats["blocks"].append(st)

    def conv(x, wt, stride=1):
        pad = wt.shape[-1] // 2
        return lax.conv_general_dilated(x, wt, (stride, stride), ((pad, pad), (pad, pad)),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"))

    def bn(x, p, s, new):
        mean = x.mean(axis=(0, 2, 3))
        var = x.var(axis=(0, 2, 3))
        n = x.shape[0] * x.shape[2] * x.shape[3]
        new.append({"mean": 0.9 * s["mean"] + 0.1 * mean,
                    "var": 0.9 * s["var"] + 0.1 * var * n / (n - 1)})
        y = (x - mean[None, :, None, None]) / jnp.sqrt(var[None, :, None, None] + 1e-5)
        return y * p["w"][None, :, None, None] + p["b"][None, :, None, None]

    def forward(p, s, x):
        new = []
        h = jax.nn.relu(bn(conv(x, p["stem"]), p["stem_bn"], s["stem_bn"], new))
        out_blocks = []
        for (cin, cout, stride), bp, bs in zip(blocks, p["blocks"], s["blocks"]):
            nb = []
            r = jax.nn.relu(bn(conv(h, bp["conv1"], stride), bp["bn1"], bs["bn1"], nb))
            r = bn(conv(r, bp["conv2"]), bp["bn2"], bs["bn2"], nb)
            names = ["bn1", "bn2"]
            if "down" in bp:
                h = bn(conv(h, bp["down"], stride), bp["down_bn"], bs["down_bn"], nb)
                names.append("down_bn")
            h = jax.nn.relu(r + h)
            out_blocks.append(dict(zip(names, nb)))
        h = h.mean(axis=(2, 3))
        return h @ p["fc"][0] + p["fc"][1], {"stem_bn": new[0], "blocks": out_blocks}

    def loss_fn(p, s, x, y):
        logits, new_s = forward(p, s, x)
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean(), new_s

    pool = jax_image_pool(w)
    return params, stats, loss_fn, pool


def jax_gpt(w):
    """The GPT of torch_gpt as pure functions over a dict of params (Linear
    weights stored [in, out]), with its loss and batch pool."""
    import jax
    import jax.numpy as jnp
    import optax

    g = w["gpt"]
    vocab, d, heads, context = g["vocab"], g["d_model"], g["heads"], g["context"]
    keys = iter(jax.random.split(jax.random.PRNGKey(0), 8 * g["layers"] + 8))

    def uniform(shape, bound):
        return jax.random.uniform(next(keys), shape, jnp.float32, -bound, bound)

    def linear(fan_in, fan_out):  # torch.nn.Linear's default init
        bound = 1.0 / fan_in ** 0.5
        return dict(w=uniform((fan_in, fan_out), bound), b=uniform((fan_out,), bound))

    def layer_norm():
        return dict(g=jnp.ones((d,), jnp.float32), b=jnp.zeros((d,), jnp.float32))

    def block():
        out_proj = linear(d, d)
        out_proj["b"] = jnp.zeros((d,), jnp.float32)
        return dict(ln1=layer_norm(),
                    in_proj=dict(w=uniform((d, 3 * d), (6.0 / (4 * d)) ** 0.5),  # xavier
                                 b=jnp.zeros((3 * d,), jnp.float32)),
                    out_proj=out_proj, ln2=layer_norm(), fc1=linear(d, 4 * d),
                    fc2=linear(4 * d, d))

    params = dict(tok=jax.random.normal(next(keys), (vocab, d), jnp.float32),
                  pos=jax.random.normal(next(keys), (context, d), jnp.float32),
                  blocks=[block() for _ in range(g["layers"])],
                  ln_f=layer_norm(), head=linear(d, vocab))

    def dense(p, x):
        return x @ p["w"] + p["b"]

    def norm(p, x, eps=1e-5):
        mu = x.mean(-1, keepdims=True)
        var = jnp.square(x - mu).mean(-1, keepdims=True)
        return (x - mu) * jax.lax.rsqrt(var + eps) * p["g"] + p["b"]

    def attention(p, x):
        b, t, _ = x.shape
        q, k, v = (z.reshape(b, t, heads, d // heads).transpose(0, 2, 1, 3)
                   for z in jnp.split(dense(p["in_proj"], x), 3, axis=-1))
        att = (q @ k.swapaxes(-1, -2)) * (d // heads) ** -0.5
        att = jnp.where(jnp.tril(jnp.ones((t, t), bool)), att, -jnp.inf)
        y = jax.nn.softmax(att, axis=-1) @ v
        return dense(p["out_proj"], y.transpose(0, 2, 1, 3).reshape(b, t, d))

    def loss_fn(p, x, y):
        h = p["tok"][x] + p["pos"][:x.shape[1]]
        for bp in p["blocks"]:
            h = h + attention(bp, norm(bp["ln1"], h))
            h = h + dense(bp["fc2"], jax.nn.gelu(dense(bp["fc1"], norm(bp["ln2"], h)),
                                                 approximate=False))
        logits = dense(p["head"], norm(p["ln_f"], h))
        return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()

    rng = jax.random.PRNGKey(DATA_SEED)
    pool = []
    for _ in range(POOL):
        rng, k = jax.random.split(rng)
        seq = jax.random.randint(k, (w["batch"], context + 1), 0, vocab)
        pool.append((seq[:, :context], seq[:, 1:]))
    return params, loss_fn, pool


def run_jax_jit(name, w, args):
    if w.get("sizes"):
        return skip("jax_jit", f"{name}: shapes that change every call are not set up "
                    "for jax.jit here")
    import jax
    import optax

    if w.get("resnet"):
        params, bn_stats, stat_loss_fn, pool = jax_resnet(w)
    else:
        params, loss_fn, pool = (jax_gpt if "gpt" in w else
                                 jax_cnn if w.get("cnn") else jax_mlp)(w)
    if w["opt"] == "sgd":
        tx = optax.sgd(w["lr"], momentum=0.9)
    else:
        tx = optax.adamw(w["lr"], b1=BETAS[0], b2=BETAS[1], eps=EPS, weight_decay=WEIGHT_DECAY)

    if w.get("resnet"):
        # Batch-norm running statistics travel with the optimizer state.
        def train_step(p, s, x, y):
            (loss, new_stats), g = jax.value_and_grad(stat_loss_fn, has_aux=True)(
                p, s["bn"], x, y)
            updates, opt_state = tx.update(g, s["opt"], p)
            return optax.apply_updates(p, updates), {"opt": opt_state, "bn": new_stats}, loss

        state = {"p": params, "s": {"opt": tx.init(params), "bn": bn_stats}}
    else:
        def train_step(p, s, x, y):
            loss, g = jax.value_and_grad(loss_fn)(p, x, y)
            updates, s = tx.update(g, s, p)
            return optax.apply_updates(p, updates), s, loss

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
    ap.add_argument("--background-load", type=int, default=0, metavar="N",
                    help="N busy processes (endless loops) run beside the benchmark "
                         "from start to end, as stepjit-bench --background-load does")
    args = ap.parse_args()
    if not 0 <= args.background_load <= 256:
        ap.error(f"--background-load must be in [0, 256], got {args.background_load}")
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    bad = [m for m in args.modes.split(",") if m and m not in ALL_MODES]
    if bad:
        ap.error(f"unknown mode(s) {','.join(bad)}; known: {','.join(ALL_MODES)}")
    load = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.background_load)]
    try:
        run_all_modes(args)
    finally:
        for p in load:
            p.kill()
        for p in load:
            p.wait()


def run_all_modes(args):
    global AMP
    AMP = args.amp
    if AMP != "f32" and "jax_jit" in args.modes:
        args.modes = ",".join(m for m in args.modes.split(",") if m != "jax_jit")
        skip("jax_jit", f"--amp {AMP}: the JAX reference is f32 only")
    modes = [m for m in args.modes.split(",") if m]
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
            if r is None:  # the runner printed why it skipped
                continue
            r["background_load"] = args.background_load
            print(json.dumps(r), flush=True)


if __name__ == "__main__":
    main()
