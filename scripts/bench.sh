#!/usr/bin/env bash
# Runtime overhead benchmark: the same clang-built program on LLVM's libomptarget and on
# ours, alternating runs in one invocation; prints the best time of each and the ratio.
# usage: scripts/bench.sh [iterations] [rounds]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
iters=${1:-200000}
rounds=${2:-5}
work="$root/target/bench"
mkdir -p "$work"
for v in 19 22; do
  flags=(-L"$root/.deps/lib$v")
  [ "$v" = 19 ] && flags+=(-I"$root/.deps/include19")
  echo "== clang-$v build, LLVM $v runtime vs ours ($iters iterations, best of $rounds)" >&2
  "clang-$v" -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu "${flags[@]}" \
    "$root/benches/runtime/target_overhead.c" -o "$work/overhead$v"
  llvm_out=""; ours_out=""
  for _ in $(seq "$rounds"); do
    llvm_out+=$(LD_LIBRARY_PATH=/usr/lib/llvm-$v/lib "$work/overhead$v" "$iters")$'\n'
    ours_out+=$(LD_LIBRARY_PATH="$root/dist/lib" "$work/overhead$v" "$iters")$'\n'
  done
  printf '%-12s %12s %12s %8s\n' case "llvm-$v ns" "ours ns" ratio
  for c in empty tofrom_8k present_8k; do
    l=$(printf '%s' "$llvm_out" | awk -v c=$c '$1==c{print $2}' | sort -g | head -1)
    o=$(printf '%s' "$ours_out" | awk -v c=$c '$1==c{print $2}' | sort -g | head -1)
    printf '%-12s %12.1f %12.1f %8.2f\n' "$c" "$l" "$o" "$(echo "$o / $l" | bc -l)"
  done
done

# Memory manager: many small map/unmap cycles with the cache on (default) and off (0).
echo "== small map/unmap cycles (clang-22 build), memory manager on vs off" >&2
clang-22 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -L"$root/.deps/lib22" \
  "$root/benches/runtime/small_maps.c" -o "$work/small_maps"
best() { for _ in $(seq "$rounds"); do "$@"; done | awk '{print $2}' | sort -g | head -1; }
printf '%-26s %12s\n' runtime "ns per map+unmap"
for t in default 0; do
  l=$(LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=$([ $t = default ] && echo 8192 || echo 0) LD_LIBRARY_PATH=/usr/lib/llvm-22/lib best "$work/small_maps" 5000)
  o=$(LIBOMPTARGET_MEMORY_MANAGER_THRESHOLD=$([ $t = default ] && echo 8192 || echo 0) LD_LIBRARY_PATH="$root/dist/lib" best "$work/small_maps" 5000)
  printf '%-26s %12.1f\n' "llvm-22, threshold=$t" "$l" "ours, threshold=$t" "$o"
done

# Two host threads mapping their own 64 MiB arrays at once (clang-22 build): the second
# thread's copies must overlap the first's. GB/s, best of the rounds.
echo "== parallel 64 MiB maps (clang-22 build), 1 and 2 host threads, GB/s" >&2
clang-22 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -L"$root/.deps/lib22" \
  "$root/benches/runtime/parallel_maps.c" -o "$work/parallel_maps"
bestbw() { for _ in $(seq "$rounds"); do "$@"; done | awk '{print $2}' | sort -g | tail -1; }
l1=$(LD_LIBRARY_PATH=/usr/lib/llvm-22/lib bestbw "$work/parallel_maps" 1 8)
o1=$(LD_LIBRARY_PATH="$root/dist/lib" bestbw "$work/parallel_maps" 1 8)
l2=$(LD_LIBRARY_PATH=/usr/lib/llvm-22/lib bestbw "$work/parallel_maps" 2 8)
o2=$(LD_LIBRARY_PATH="$root/dist/lib" bestbw "$work/parallel_maps" 2 8)
printf '%-10s %10s %10s\n' threads "llvm-22" ours
printf '%-10s %10.2f %10.2f\n' 1 "$l1" "$o1" 2 "$l2" "$o2"
printf 'ours 2 threads / 1 thread: %.2f   ours / llvm-22 with 2 threads: %.2f\n' \
  "$(echo "$o2 / $o1" | bc -l)" "$(echo "$o2 / $l2" | bc -l)"
