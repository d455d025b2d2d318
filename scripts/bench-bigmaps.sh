#!/usr/bin/env bash
# Large mappings at memory speed (issue 24, item 7): two 64 MiB arrays per host thread entered
# and exited repeatedly (benches/runtime/big_maps.c), on LLVM's runtime, on ours with the host
# device and with the isolated device (LIBOMPTARGET_ISOLATE=1), next to a plain memcpy of the
# same bytes measured in the same run. Prints GB/s (best of the rounds), each figure's ratio
# to memcpy, and two threads against one. Goals: ours >= 0.6x memcpy (host and isolated) and
# two threads >= 1.6x one thread. Needs `make dist`.
# usage: scripts/bench-bigmaps.sh [rounds-per-run] [runs]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
rounds=${1:-10}
runs=${2:-3}
work="$root/target/bench"
mkdir -p "$work"
echo "== large mappings: 2 x 64 MiB per thread, enter to/exit from (clang-22 build), GB/s, best of $runs" >&2
clang-22 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -L"$root/.deps/lib22" \
  "$root/benches/runtime/big_maps.c" -o "$work/big_maps"

# best LIBS [VAR=VALUE...] -- ARGS: the highest GB/s of $runs runs.
best() {
  local libs=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  for _ in $(seq "$runs"); do
    env "${envs[@]}" LD_LIBRARY_PATH="$libs" "$work/big_maps" "$@" "$rounds"
  done | awk '{print $2}' | sort -g | tail -1
}
ratio() { echo "$1 / $2" | bc -l; }

printf '%-26s %10s %10s %10s %12s\n' runtime "1 thread" "2 threads" "2t / 1t" "1t / memcpy"
row() {
  local name=$1 one=$2 two=$3
  printf '%-26s %10.2f %10.2f %10.2f %12.2f\n' "$name" "$one" "$two" "$(ratio "$two" "$one")" "$(ratio "$one" "$m1")"
}
llvm=/usr/lib/llvm-22/lib
ours="$root/dist/lib"
m1=$(best "$llvm" -- memcpy 1)
m2=$(best "$llvm" -- memcpy 2)
row memcpy "$m1" "$m2"
row "llvm-22, host" "$(best "$llvm" -- maps 1)" "$(best "$llvm" -- maps 2)"
row "ours, host" "$(best "$ours" -- maps 1)" "$(best "$ours" -- maps 2)"
row "ours, isolated" "$(best "$ours" LIBOMPTARGET_ISOLATE=1 -- maps 1)" "$(best "$ours" LIBOMPTARGET_ISOLATE=1 -- maps 2)"
row "ours, host, no cache" "$(best "$ours" LIBOMPTARGET_MEMORY_MANAGER_CACHE=0 -- maps 1)" \
  "$(best "$ours" LIBOMPTARGET_MEMORY_MANAGER_CACHE=0 -- maps 2)"
echo "goals: ours >= 0.60 x memcpy (1 thread, host and isolated); 2 threads >= 1.60 x 1 thread"
