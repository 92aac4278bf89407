#!/usr/bin/env bash
# The GPU proof, for one device call on the GPU machine, from the repo root:
# unpacks the bundle from scripts/bundle-gpu, prints what the machine has,
# runs cuda_tests on the real driver, then times stepjit eager and compiled
# (the compiled steps' first replays checked against eager, STEPJIT_CHECK=2),
# PyTorch eager, torch.compile and torch.compile(mode="reduce-overhead") on
# the same workloads, takes one per-kernel profile of the largest GPT step,
# measures copy / fused-elementwise bandwidth and runs the NCCL tests, and
# prints one table (bench/gpu/README.md).
#
#   bash bench/gpu/check.sh [--emulator] [gpu-bundle/stepjit-gpu.tar.xz]
#
# --emulator: the dry run for a machine without a GPU: the same phases and
# output format on the host emulator (STEPJIT_CUDA_BACKEND=emulator), with
# the small workloads and few steps (the emulator runs kernels on the CPU).
# Each phase runs under `timeout`, capped by what is left of a total budget
# ($STEPJIT_CHECK_BUDGET seconds, default 480, which leaves a 600 s device
# call room to spare), and a failing phase is reported and skipped past.
# Phases run most valuable first: what the machine has, the CUDA tests, the
# step timings (the GPU-sized workloads first), then the profile, bandwidth
# and NCCL. Before each phase starts, what has finished is saved to $OUT
# (else a temporary folder): check.log (everything), table.txt, env.txt,
# stepjit.jsonl, torch.jsonl, cuda_tests.xml, nccl_tests.xml. A test phase
# passes only when its gtest report shows no failure and at least one pass
# (bench/gpu/gtest_summary.py): a run in which every test skipped (no
# device) proves nothing and is a failure.
# The nccl phase finds libnccl.so.2 on the machine (the CUDA installation,
# the loader cache, or the nvidia-nccl wheel PyTorch depends on; the bundle
# does not carry it) and runs the NCCL tests of cuda_tests on the device in a
# world of one: the communicator's three collectives, dist collectives
# forced through NCCL, and a compiled step whose all_reduce is captured in a
# CUDA graph; one row per test is added under the table. It is skipped, not
# failed, when NCCL is not found.
# Knobs: STEPJIT_CHECK_STEPS (timed steps, default 50), STEPJIT_CHECK_NUMEL
# (bandwidth elements, default 2^28: 1 GiB of f32, far past the 60 MB L2),
# STEPJIT_CHECK_CUDA_GRAPHS (on or off, stepjit-bench's --cuda-graphs,
# default on), STEPJIT_CHECK_MULTI_REGION (on or off, --multi-region,
# default on), STEPJIT_CHECK_WORKLOADS (the workloads, in order),
# STEPJIT_GPU_DIR (where to unpack), STEPJIT_BENCH_PYTHON (default python3).
set -euo pipefail

repo="$(cd "$(dirname "$0")/../.." && pwd)"
cd "$repo"
emulator=0
if [[ "${1:-}" == "--emulator" ]]; then
  emulator=1
  shift
fi
tarball="${1:-gpu-bundle/stepjit-gpu.tar.xz}"
budget="${STEPJIT_CHECK_BUDGET:-480}"
if ((emulator)); then
  # Every CUDA call goes to the host emulator, in the tests too.
  export STEPJIT_CUDA_BACKEND=emulator
  steps="${STEPJIT_CHECK_STEPS:-3}"
  numel="${STEPJIT_CHECK_NUMEL:-1048576}"
else
  steps="${STEPJIT_CHECK_STEPS:-50}"
  numel="${STEPJIT_CHECK_NUMEL:-268435456}"
fi
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
  save_results
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
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,clocks.sm,clocks.mem,temperature.gpu,power.draw \
      --format=csv
    nvidia-smi -L
  else
    echo "nvidia-smi: not on this machine"
  fi
  echo "kernel: $(uname -r); $(ldd --version | head -n 1)"
  grep PRETTY_NAME /etc/os-release || true
  "$python" -c 'import sys, torch; print("python", sys.version.split()[0], "torch",
torch.__version__, "cuda", torch.version.cuda)' || echo "PyTorch: not importable"
}

# What stepjit finds on the machine: the GPU, the driver, NVRTC, the CUDA
# headers its kernels compile with and cuBLASLt (stepjit-bench --info).
device_info() {
  "$bin/stepjit-bench" --info --device cuda
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
# `stepjit-bench --help`), so that a crash costs one row, not the rest. The
# first two replays of each compiled step are checked against eager
# (STEPJIT_CHECK=2, inside the warmup): the rows carry the checker's verdict
# and the first and last loss. No compile-time probes (two more processes
# per workload).
stepjit_workloads() {
  local w rc=0
  for w in $workloads; do
    STEPJIT_CHECK=2 "$bin/stepjit-bench" --device cuda --cuda-graphs "$cuda_graphs" \
      --multi-region "$multi_region" --compile-times off \
      --json --steps "$steps" --warmup "$warmup" --workload "$w" ||
      { echo "stepjit-bench: $w failed (exit $?)"; rc=1; }
  done
  return $rc
}

# The CUDA tests on the device, except NCCL's (their own phase, so that a
# hang there cannot take these results with it); passes only when the
# report shows a pass and no failure.
cuda_tests_check() {
  local rc=0
  STEPJIT_TEST_CUDA_BACKEND="$test_backend" "$bin/cuda_tests" --gtest_brief=1 \
    '--gtest_filter=-Nccl*:CudaCollective*' "--gtest_output=xml:$out/cuda_tests.xml" || rc=$?
  "$python_any" "$repo/bench/gpu/gtest_summary.py" "cuda_tests=$out/cuda_tests.xml" \
    | tee -a "$work/tests.txt" || rc=1
  return $rc
}

# One profiled run (STEPJIT_PROFILE=1) of the largest workload: its compiled
# step's kernels by time, into $work/profile.txt.
profile_check() {
  local rc=0
  STEPJIT_PROFILE=1 "$bin/stepjit-bench" --device cuda --cuda-graphs "$cuda_graphs" \
    --multi-region "$multi_region" --compile-times off --steps "$profile_steps" \
    --warmup 3 --workload "$profile_workload" 2>"$work/profile_err.txt" || rc=$?
  cat "$work/profile_err.txt"
  # The compiled step's section: its header and its 25 costliest kernels.
  awk '/^in .*\(compiled\)/ {on = 1; n = 0} /^in .*\((eager|traced)\)/ {on = 0}
       on && n < 27 {print; n++}' "$work/profile_err.txt" >"$work/profile.txt"
  [[ -s "$work/profile.txt" ]] || { echo "no compiled section in the profile"; rc=1; }
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
  STEPJIT_NCCL_LIBRARY="$lib" STEPJIT_TEST_CUDA_BACKEND="$test_backend" STEPJIT_DIST_TIMEOUT_S=20 \
    NCCL_DEBUG="${NCCL_DEBUG:-WARN}" \
    "$bin/cuda_tests" '--gtest_filter=Nccl*:CudaCollective*' \
    "--gtest_output=xml:$out/nccl_tests.xml" >"$work/nccl_tests.txt" 2>&1 || rc=$?
  cat "$work/nccl_tests.txt"
  "$python_any" "$repo/bench/gpu/gtest_summary.py" "nccl_tests=$out/nccl_tests.xml" \
    | tee -a "$work/tests.txt" || rc=1
  {
    printf '%-64s %-8s %s\n' "NCCL check ($(basename "$lib"), world of one)" "result" "ms"
    sed -n 's/^\[ *\(OK\|FAILED\|SKIPPED\) *\] \([A-Za-z0-9_.\/]*\) (\([0-9]*\) ms)$/\2 \1 \3/p' \
      "$work/nccl_tests.txt" | awk '{printf "%-64s %-8s %s\n", $1, $2, $3}'
  } >"$work/nccl_rows.txt"
  cat "$work/nccl_rows.txt"
  return $rc
}

# Collects the JSON lines of the phases that ran so far into $out and
# writes table.txt from them: a device call cut short keeps what finished.
save_results() {
  local name
  [[ -d "$work" ]] || return 0
  for name in stepjit_bench stepjit_bandwidth; do
    grep -h '^{' "$work/$name.log" 2>/dev/null || true
  done >"$out/stepjit.jsonl"
  for name in torch_bench torch_bandwidth; do
    grep -h '^{' "$work/$name.log" 2>/dev/null || true
  done >"$out/torch.jsonl"
  grep -h '^skip: ' "$work"/torch_*.log 2>/dev/null | sort -u >"$work/skips.txt" || true
  printf '%s\n' "${failures[@]+"${failures[@]}"}" >"$work/failures.txt"
  "$python_any" "$repo/bench/gpu/table.py" --gpu "$gpu" --failures "$work/failures.txt" \
    --skips "$work/skips.txt" --tests "$work/tests.txt" --profile "$work/profile.txt" \
    "$out/stepjit.jsonl" "$out/torch.jsonl" >"$out/table.txt" 2>&1 || true
  if [[ -s "$work/nccl_rows.txt" ]]; then
    { echo; cat "$work/nccl_rows.txt"; } >>"$out/table.txt"
  fi
}

bin="$unpack_dir/stepjit-gpu/bin"
# The rows of the table, for stepjit-bench and torch_gpu.py alike, in the
# order they run: most valuable first (the GPU-sized workloads), so that a
# phase cut short by its limit loses the small ones.
if ((emulator)); then
  # The emulator runs kernels on the CPU: the small workloads only.
  workloads="${STEPJIT_CHECK_WORKLOADS:-tiny_mlp_adamw_b32 gpt_d64_l1_t32_b16}"
  profile_workload="gpt_d64_l1_t32_b16"
  test_backend=emulator
  warmup=3
  profile_steps=2
else
  workloads="${STEPJIT_CHECK_WORKLOADS:-mlp4096x4_adamw_b4096_bf16 gpt_d512_l8_t256_b32_bf16
    gpt_d128_l4_t128_b32 mlp1024x3_adamw_b512 mlp784_adamw_b128 mlp784_sgd_b128 tiny_mlp_adamw_b32
    cnn_adamw_b128}"
  profile_workload="gpt_d512_l8_t256_b32_bf16"
  test_backend=driver
  warmup=10
  profile_steps=10
fi
# The tables need only the standard library: any python3 will do.
python_any="$(command -v python3 || echo "$python")"
gpu="an unknown GPU"
if ((emulator)); then
  gpu="the host emulator (a dry run: no GPU)"
elif command -v nvidia-smi >/dev/null; then
  gpu="$(timeout 10 nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null |
         head -n 1)" || gpu="an unknown GPU"
fi
: >"$work/tests.txt"
# `timeout` runs programs, so the functions above run in a child bash.
export -f environment unpack dependencies device_info stepjit_workloads cuda_tests_check \
  profile_check find_nccl nccl_check
export python python_any repo out unpack_dir tarball work bin steps warmup cuda_graphs \
  multi_region workloads test_backend profile_workload profile_steps
phase env 20 bash -c environment
cp "$work/env.log" "$out/env.txt" 2>/dev/null || true
if [[ ! -f "$tarball" ]]; then
  say "== no bundle at $tarball (make it with scripts/bundle-gpu and carry gpu-bundle)"
  failures+=("unpack: no $tarball")
else
  phase unpack 60 bash -c unpack
  phase dependencies 30 bash -c dependencies
fi
if [[ -s "$work/extra_lib_path" ]]; then
  export LD_LIBRARY_PATH="$(cat "$work/extra_lib_path")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi

if [[ -x "$bin/stepjit-bench" ]]; then
  phase device_info 20 bash -c device_info
  cat "$work/device_info.log" >>"$out/env.txt" 2>/dev/null || true
fi
if [[ -x "$bin/cuda_tests" ]]; then
  phase cuda_tests 90 bash -c cuda_tests_check
fi
if [[ -x "$bin/stepjit-bench" ]]; then
  phase stepjit_bench 110 bash -c stepjit_workloads
fi
# torch.compile takes tens of seconds per workload and mode; torch_gpu.py
# runs the three modes of a workload before the next.
phase torch_bench 130 "$python" bench/gpu/torch_gpu.py --steps "$steps" --warmup "$warmup" \
  --workload "$(echo $workloads | tr ' ' ',')"
if [[ -x "$bin/stepjit-bench" ]]; then
  phase profile 40 bash -c profile_check
  phase stepjit_bandwidth 25 "$bin/stepjit-bench" --device cuda --cuda-graphs "$cuda_graphs" \
    --bandwidth --json --numel "$numel" --steps 30
fi
phase torch_bandwidth 30 "$python" bench/gpu/torch_gpu.py --bandwidth --numel "$numel" --steps 30
if [[ -x "$bin/cuda_tests" ]]; then
  phase nccl 45 bash -c nccl_check
fi

reserve=0
save_results
echo
cat "$out/table.txt" 2>/dev/null || true
echo "check took ${SECONDS}s of its ${budget}s budget; results in $out"
rm -rf "$work"
