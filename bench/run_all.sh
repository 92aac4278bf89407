#!/usr/bin/env bash
# Runs stepjit-bench and the PyTorch/JAX peers (bench/torch_reference.py) in
# one go and prints one table with ratios against torch_eager.
#
#   bench/run_all.sh [--build DIR] [--python PY] [--steps N] [--warmup N] [--workload NAME]
#                    [--amp f32|bf16] [--background-load N]
#
# --amp bf16 runs stepjit's steps with bf16 autocast and the torch peers
# under torch.autocast (jax_jit is f32 only and is skipped).
# --background-load N runs N busy processes beside every benchmark (stepjit's
# and the peers' alike), as other work on a shared machine would.
#
# The peer interpreter is the first of: --python, $STEPJIT_BENCH_PYTHON,
# <repo>/.venv/bin/python, python3, /usr/bin/python3 (Debian's python3-torch)
# that imports torch; without one the PyTorch peers are skipped with a line
# saying so. Skipped modes are listed at the end of the table.
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
build="$repo/build"
python=""
steps=50
warmup=5
workload=()
amp=()
load=0
usage() { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'; }
while [[ $# -gt 0 ]]; do
  case "$1" in
    --build) build="$2"; shift 2 ;;
    --python) python="$2"; shift 2 ;;
    --steps) steps="$2"; shift 2 ;;
    --warmup) warmup="$2"; shift 2 ;;
    --workload) workload=(--workload "$2"); shift 2 ;;
    --amp) amp=(--amp "$2"); shift 2 ;;
    --background-load) load="$2"; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "run_all.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

bench="$build/tools/stepjit-bench"
if [[ ! -x "$bench" ]]; then
  echo "run_all.sh: $bench not found; build it with" >&2
  echo "  cmake -S $repo -B $build -G Ninja && ninja -C $build stepjit-bench" >&2
  exit 1
fi

if [[ -z "$python" ]]; then
  python="${STEPJIT_BENCH_PYTHON:-}"
fi
if [[ -z "$python" ]]; then
  for cand in "$repo/.venv/bin/python" python3 /usr/bin/python3; do
    if command -v "$cand" >/dev/null 2>&1 && "$cand" -c "import torch" >/dev/null 2>&1; then
      python="$cand"
      break
    fi
  done
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
skips="$tmp/skips.txt"
: >"$skips"

echo "== stepjit-bench (steps $steps, warmup $warmup, background load $load)" >&2
"$bench" --json --steps "$steps" --warmup "$warmup" --background-load "$load" \
  "${workload[@]}" "${amp[@]}" >"$tmp/stepjit.jsonl"

if [[ -n "$python" ]]; then
  echo "== peers with $python ($("$python" -c 'import torch; print("torch", torch.__version__)'))" >&2
  "$python" "$repo/bench/torch_reference.py" --json --steps "$steps" --warmup "$warmup" \
    --background-load "$load" "${workload[@]}" "${amp[@]}" \
    >"$tmp/peers.jsonl" 2>"$tmp/peers.err" || {
      echo "run_all.sh: torch_reference.py failed:" >&2
      cat "$tmp/peers.err" >&2
    }
  grep '^skip: ' "$tmp/peers.err" >>"$skips" || true
else
  : >"$tmp/peers.jsonl"
  echo "skip: torch_eager, torch_compile, jax_jit: no Python interpreter here imports torch" \
       "(tried .venv/bin/python, python3, /usr/bin/python3; apt-get install python3-torch)" >>"$skips"
fi

python3 - "$tmp/stepjit.jsonl" "$tmp/peers.jsonl" "$skips" <<'EOF'
import json, sys
rows = [json.loads(l) for f in sys.argv[1:3] for l in open(f) if l.strip()]
order = {"eager": 0, "compiled": 1, "torch_eager": 2, "torch_compile": 3, "jax_jit": 4}
rows.sort(key=lambda r: (r["workload"], order.get(r["mode"], 9)))
base = {(r["workload"], r["mode"]): r["ms_per_step"] for r in rows}

def fmt(v, spec, suffix=""):
    return "-" if v is None else format(v, spec) + suffix

load = max((r.get("background_load", 0) for r in rows), default=0)
if load:
    print(f"under a background load of {load} busy process(es) beside every step")
print(f"{'workload':22} {'mode':14} {'ms/step':>9} {'vs eager':>9} {'vs torch':>9} "
      f"{'kern/step':>10} {'cold ms':>9} {'warm ms':>9} {'peak MB':>8}")
for r in rows:
    ms = r["ms_per_step"]
    eager = base.get((r["workload"], "eager"))
    torch = base.get((r["workload"], "torch_eager"))
    # Ratios are speedups: >1 means faster than the reference.
    vs_e = eager / ms if eager and r["mode"] in ("eager", "compiled") else None
    vs_t = torch / ms if torch else None
    peak = r["peak_bytes"] / 1048576 if r["peak_bytes"] is not None else None
    print(f"{r['workload']:22} {r['mode']:14} {ms:9.3f} {fmt(vs_e, '.2f', 'x'):>9} "
          f"{fmt(vs_t, '.2f', 'x'):>9} {fmt(r['kernels_per_step'], 'd'):>10} "
          f"{r['compile_ms_cold']:9.1f} {r['compile_ms_warm']:9.1f} {fmt(peak, '8.2f'):>8}")
skipped = [l.strip() for l in open(sys.argv[3]) if l.strip()]
print("skipped peers:" if skipped else "skipped peers: none")
for l in skipped:
    print("  " + l)
print("ms/step is the median of individually timed steps; the machine is shared, "
      "so compare ratios from the same run.")
EOF
