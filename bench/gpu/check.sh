#!/usr/bin/env bash
# The GPU proof, for one device call on the GPU machine, from the repo root:
# unpacks the bundle from scripts/bundle-gpu, runs cuda_tests on the real
# driver, then times stepjit eager and compiled, PyTorch eager, torch.compile
# and torch.compile(mode="reduce-overhead") on the same workloads and the
# copy / fused-elementwise bandwidth, and prints one table (bench/gpu/README.md).
#
#   bash bench/gpu/check.sh [dist/stepjit-gpu.tar.xz]
#
# Each phase runs under `timeout`, capped by what is left of a total budget
# ($STEPJIT_CHECK_BUDGET seconds, default 360), and a failing phase is
# reported and skipped past. Results go to $OUT when set (else a temporary
# folder), at most 8 files: check.log (everything), table.txt, env.txt,
# stepjit.jsonl, torch.jsonl, cuda_tests.xml.
# The nccl phase (after cuda_tests) finds libnccl.so.2 on the machine (the
# CUDA installation, the loader cache, or the nvidia-nccl wheel PyTorch
# depends on; the bundle does not carry it) and runs the NCCL tests of
# cuda_tests on the device in a world of one: the communicator's three
# collectives, dist collectives forced through NCCL, and a compiled step
# whose all_reduce is captured in a CUDA graph; one row per test is added
# under the table. It is skipped, not failed, when NCCL is not found.
# Knobs: STEPJIT_CHECK_STEPS (timed steps, default 50), STEPJIT_CHECK_NUMEL
# (bandwidth elements, default 2^28: 1 GiB of f32, far past the 60 MB L2),
# STEPJIT_CHECK_CUDA_GRAPHS (on or off, stepjit-bench's --cuda-graphs,
# default on), STEPJIT_CHECK_MULTI_REGION (on or off, --multi-region,
# default on), STEPJIT_GPU_DIR (where to unpack), STEPJIT_BENCH_PYTHON
# (default python3).
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
tarball="${1:-dist/stepjit-gpu.tar.xz}"
budget="${STEPJIT_CHECK_BUDGET:-360}"
steps="${STEPJIT_CHECK_STEPS:-50}"
numel="${STEPJIT_CHECK_NUMEL:-268435456}"
cuda_graphs="${STEPJIT_CHECK_CUDA_GRAPHS:-on}"
multi_region="${STEPJIT_CHECK_MULTI_REGION:-on}"
python="${STEPJIT_BENCH_PYTHON:-python3}"
unpack_dir="${STEPJIT_GPU_DIR:-/tmp/stepjit-gpu-check}"
out="${OUT:-$(mktemp -d /tmp/stepjit-check-out.XXXXXX)}"
work="$(mktemp -d /tmp/stepjit-check-work.XXXXXX)"
mkdir -p "$out"
log="$out/check.log"
: >"$log"
failures=()
# Seconds kept back from the budget for the table at the end.
reserve=10

say() { echo "$*" | tee -a "$log"; }

# phase NAME LIMIT CMD...: runs CMD with its output in $work/NAME.log,
# stopped after LIMIT seconds or when the budget runs out; a failure is
# recorded and shown, never fatal.
phase() {
  local name="$1" limit="$2"
  shift 2
  local left=$((budget - SECONDS - reserve))
  if ((left < 5)); then
    say "== $name: skipped, the ${budget}s budget is spent"
    failures+=("$name: skipped (budget spent)")
    return 0
  fi
  ((limit > left)) && limit=$left
  say "== $name (limit ${limit}s)"
  local t0=$SECONDS rc=0
  timeout --kill-after=5 "$limit" "$@" >"$work/$name.log" 2>&1 || rc=$?
  cat "$work/$name.log" >>"$log"
  if ((rc != 0)); then
    local why="exit $rc"
    ((rc == 124 || rc == 137)) && why="timed out after ${limit}s"
    failures+=("$name: $why")
    say "-- $name FAILED ($why) after $((SECONDS - t0))s; last lines:"
    tail -n 15 "$work/$name.log" | sed 's/^/   /'
  else
    say "-- $name ok in $((SECONDS - t0))s"
  fi
}

environment() {
  nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv
  nvidia-smi -L
  echo "kernel: $(uname -r); $(ldd --version | head -n 1)"
  grep PRETTY_NAME /etc/os-release || true
  "$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch",
torch.__version__, "cuda", torch.version.cuda)'
}

unpack() {
  rm -rf "$unpack_dir"
  mkdir -p "$unpack_dir"
  tar -xJf "$tarball" -C "$unpack_dir"
  cat "$unpack_dir/stepjit-gpu/MANIFEST"
}

# Finds the CUDA libraries the bundle leaves out (libnvrtc is linked,
# libcublasLt opened at run time): in the rpath's CUDA folders or the loader
# cache, else anywhere under /usr/local, /opt, /usr/lib (the CUDA Python
# wheels), whose folder then goes to $work/extra_lib_path. Fails when ldd
# still reports something missing, an older glibc included.
dependencies() {
  local bin="$unpack_dir/stepjit-gpu/bin" extra="" lib found
  for lib in libnvrtc.so.13 libcublasLt.so.13; do
    if compgen -G "/usr/local/cuda/lib64/$lib" >/dev/null ||
       compgen -G "/usr/local/cuda/targets/x86_64-linux/lib/$lib" >/dev/null ||
       ldconfig -p | grep -q "$lib "; then
      continue
    fi
    found="$(find /usr/local /opt /usr/lib -name "$lib" 2>/dev/null | head -n 1)"
    if [[ -n "$found" ]]; then
      echo "$lib: not on the rpath; using $found"
      extra="${extra:+$extra:}$(dirname "$found")"
    else
      echo "$lib: not found on this machine"
    fi
  done
  if [[ -n "$extra" ]]; then
    echo "$extra" >"$work/extra_lib_path"
    export LD_LIBRARY_PATH="$extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  fi
  ldd "$bin"/* 2>&1 | tee "$work/ldd.txt"
  ! grep -q 'not found' "$work/ldd.txt"
}

# stepjit-bench --device cuda, one process per workload (the list of
# `stepjit-bench --help`), so that a crash costs one row, not the rest.
stepjit_workloads() {
  local w rc=0
  for w in $workloads; do
    "$bin/stepjit-bench" --device cuda --cuda-graphs "$cuda_graphs" --multi-region "$multi_region" \
      --json --steps "$steps" --warmup 10 --workload "$w" || { echo "stepjit-bench: $w failed (exit $?)"; rc=1; }
  done
  return $rc
}

# Prints the libnccl.so.2 to use: $STEPJIT_NCCL_LIBRARY, the CUDA
# installation, the loader cache, the nvidia-nccl wheel of $python, or any
# under /usr/local, /opt, /usr/lib. Fails when there is none.
find_nccl() {
  local found="" dir
  if [[ -n "${STEPJIT_NCCL_LIBRARY:-}" && -e "$STEPJIT_NCCL_LIBRARY" ]]; then
    echo "$STEPJIT_NCCL_LIBRARY"
    return 0
  fi
  for dir in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -e "$dir/libnccl.so.2" ]] && { echo "$dir/libnccl.so.2"; return 0; }
  done
  found="$(ldconfig -p 2>/dev/null | awk '$1 == "libnccl.so.2" {print $NF; exit}')"
  if [[ -z "$found" ]]; then
    dir="$(timeout 20 "$python" -c 'import nvidia.nccl as n; print(list(n.__path__)[0])' 2>/dev/null)" || true
    [[ -n "$dir" && -e "$dir/lib/libnccl.so.2" ]] && found="$dir/lib/libnccl.so.2"
  fi
  if [[ -z "$found" ]]; then
    found="$(find /usr/local /opt /usr/lib -name libnccl.so.2 2>/dev/null | head -n 1)"
  fi
  [[ -n "$found" ]] && echo "$found"
}

# The NCCL tests of cuda_tests on the real device, one table row each
# (name, result, ms) in $work/nccl_rows.txt. Exit 0 when NCCL is missing
# (the rows say so): a machine without it is not a failure of stepjit.
nccl_check() {
  local lib rc=0
  lib="$(find_nccl)" || true
  if [[ -z "$lib" ]]; then
    echo "NCCL: libnccl.so.2 not found (no CUDA installation copy, no nvidia-nccl wheel)"
    printf '%-64s %-8s %s\n' "nccl (libnccl.so.2 not found)" "skipped" "-" >"$work/nccl_rows.txt"
    return 0
  fi
  echo "NCCL: $lib"
  # A 20 s dist timeout turns a hung NCCL init or collective into the
  # tests' clear error well inside the phase's limit; NCCL_DEBUG=WARN puts
  # NCCL's own reason for a failure in the log.
  STEPJIT_NCCL_LIBRARY="$lib" STEPJIT_TEST_CUDA_BACKEND=driver STEPJIT_DIST_TIMEOUT_S=20 \
    NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
    "$bin/cuda_tests" '--gtest_filter=Nccl*:CudaCollective*' >"$work/nccl_tests.txt" 2>&1 ||
    rc=$?
  cat "$work/nccl_tests.txt"
  {
    printf '%-64s %-8s %s\n' "NCCL check ($(basename "$lib"), world of one)" "result" "ms"
    sed -n 's/^\[ *\(OK\|FAILED\|SKIPPED\) *\] \([A-Za-z0-9_.\/]*\) (\([0-9]*\) ms)$/\2 \1 \3/p' \
      "$work/nccl_tests.txt" | awk '{printf "%-64s %-8s %s\n", $1, $2, $3}'
  } >"$work/nccl_rows.txt"
  cat "$work/nccl_rows.txt"
  return $rc
}

bin="$unpack_dir/stepjit-gpu/bin"
# The rows of the table, for stepjit-bench and torch_gpu.py alike, in the
# order they run: the GPT language models last, so that a phase cut short
# by its limit still has the MLP rows.
workloads="mlp784_adamw_b128 mlp784_sgd_b128 tiny_mlp_adamw_b32 mlp1024x3_adamw_b512
  mlp4096x4_adamw_b4096_bf16 gpt_d128_l4_t128_b32 gpt_d512_l8_t256_b32_bf16"
# `timeout` runs programs, so the functions above run in a child bash.
export -f environment unpack dependencies stepjit_workloads find_nccl nccl_check
export python unpack_dir tarball work bin steps cuda_graphs multi_region workloads
phase env 30 bash -c environment
cp "$work/env.log" "$out/env.txt" 2>/dev/null || true
if [[ ! -f "$tarball" ]]; then
  say "== no bundle at $tarball (make it with scripts/bundle-gpu and carry dist)"
  failures+=("unpack: no $tarball")
else
  phase unpack 60 bash -c unpack
  phase dependencies 30 bash -c dependencies
fi
if [[ -s "$work/extra_lib_path" ]]; then
  export LD_LIBRARY_PATH="$(cat "$work/extra_lib_path")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if [[ -x "$bin/cuda_tests" ]]; then
  phase cuda_tests 90 env STEPJIT_TEST_CUDA_BACKEND=driver \
    "$bin/cuda_tests" --gtest_brief=1 "--gtest_output=xml:$out/cuda_tests.xml"
  phase nccl 60 bash -c nccl_check
fi
if [[ -x "$bin/stepjit-bench" ]]; then
  phase stepjit_bench 150 bash -c stepjit_workloads
  phase stepjit_bandwidth 40 "$bin/stepjit-bench" --device cuda --cuda-graphs "$cuda_graphs" \
    --bandwidth --json --numel "$numel" --steps 30
fi
phase torch_bandwidth 45 "$python" bench/gpu/torch_gpu.py --bandwidth --numel "$numel" --steps 30
# Last: torch.compile is the slowest phase and gets what the budget leaves.
phase torch_bench 200 "$python" bench/gpu/torch_gpu.py --steps "$steps" --warmup 10 \
  --workload "$(echo $workloads | tr ' ' ',')"

# JSON lines only; skip lines and errors stay in check.log.
for name in stepjit_bench stepjit_bandwidth; do
  grep -h '^{' "$work/$name.log" 2>/dev/null || true
done >"$out/stepjit.jsonl"
for name in torch_bench torch_bandwidth; do
  grep -h '^{' "$work/$name.log" 2>/dev/null || true
done >"$out/torch.jsonl"
grep -h '^skip: ' "$work"/torch_*.log 2>/dev/null | sort -u >"$work/skips.txt" || true
gpu="$(timeout 10 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
       head -n 1)" || true

reserve=0
printf '%s\n' "${failures[@]}" >"$work/failures.txt"
phase table 10 "$python" bench/gpu/table.py --gpu "${gpu:-an unknown GPU}" \
  --failures "$work/failures.txt" --skips "$work/skips.txt" "$out/stepjit.jsonl" "$out/torch.jsonl"
cp "$work/table.log" "$out/table.txt" 2>/dev/null || true
if [[ -s "$work/nccl_rows.txt" ]]; then
  { echo; cat "$work/nccl_rows.txt"; } >>"$out/table.txt"
fi
echo
cat "$out/table.txt" 2>/dev/null || true
echo "results in $out"
rm -rf "$work"
