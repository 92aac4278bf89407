#!/usr/bin/env bash
# A tiny lit: runs the `// RUN:` lines of one IR test; any failure fails it.
#
#   run_lit.sh <stepjit-opt> <FileCheck> <test.ir> <scratch dir>
#
# Substitutions: %s the test file, %t a scratch path for this test (removed
# first), and the words stepjit-opt / FileCheck become the given binaries.
# `not CMD` succeeds when CMD exits non-zero without crashing. A RUN line
# ending in '\' continues on the next RUN line. Each line runs in
# `bash -o pipefail`, so a failure anywhere in a pipe fails the test.
set -u
if [[ $# -ne 4 ]]; then
  echo "usage: $0 <stepjit-opt> <FileCheck> <test.ir> <scratch dir>" >&2
  exit 2
fi
opt=$1 filecheck=$2 test=$3 scratch=$4
tmp="$scratch/$(basename "$test").tmp"
rm -rf "$tmp"
mkdir -p "$scratch"

prelude='not() { "$@"; local rc=$?; [[ $rc -ne 0 && $rc -lt 128 ]]; }'
commands=()
pending=""
while IFS= read -r line; do
  [[ $line =~ ^[[:space:]]*//[[:space:]]*RUN:(.*)$ ]] || continue
  cmd="${BASH_REMATCH[1]}"
  if [[ $cmd =~ ^(.*)\\[[:space:]]*$ ]]; then
    pending+="${BASH_REMATCH[1]} "
    continue
  fi
  commands+=("$pending$cmd")
  pending=""
done < "$test"
if [[ ${#commands[@]} -eq 0 ]]; then
  echo "$test: no RUN lines" >&2
  exit 1
fi

for cmd in "${commands[@]}"; do
  cmd="${cmd//%s/$test}"
  cmd="${cmd//%t/$tmp}"
  before='(^|[[:space:]|;&(])' after='([[:space:]]|$)'
  cmd=$(sed -E -e "s#${before}stepjit-opt${after}#\\1$opt\\2#g" \
               -e "s#${before}FileCheck${after}#\\1$filecheck\\2#g" <<< "$cmd")
  echo "RUN: $cmd"
  if ! bash -o pipefail -c "$prelude
$cmd"; then
    echo "FAILED: $cmd" >&2
    exit 1
  fi
done
