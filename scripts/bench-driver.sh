#!/usr/bin/env bash
# ompcc vs clang's own driver building the same multi-file program (tests/programs/driver/make),
# in the same run: one-shot build (all sources and the link in one command) and a Make-style
# build (one -c per source, then the link), each repeated; prints seconds and the ratio.
# With LLVM 19 also a two-target build (x86_64 + amdgcn gfx90a, one-shot), with LLVM 19's GPU
# device runtime from .deps/ (scripts/setup.sh); Debian has none for LLVM 22.
# Goal: ompcc/clang <= 1.1. Usage: scripts/bench-driver.sh [LLVM major, default 22] [reps, default 5]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
v=${1:-22}
reps=${2:-5}
ompcc="$root/dist/bin/ompcc"
[ -x "$ompcc" ] || { echo "bench-driver: $ompcc missing: run 'make dist'" >&2; exit 1; }
src="$root/tests/programs/driver/make"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
flags=(-fopenmp -O2 -Wno-unused-command-line-argument)
deps=(-L"$root/.deps/lib$v")
[ "$v" = 19 ] && deps+=(-I"$root/.deps/include19")
clang_cmd=("clang-$v" "${flags[@]}" -fopenmp-targets=x86_64-pc-linux-gnu "${deps[@]}")
ompcc_cmd=("$ompcc" "--clang=clang-$v" "${flags[@]}" "${deps[@]}")
files=(main.c sum.c scale.c)
gpurtl="$root/.deps/libomp-19-dev/usr/lib/llvm-19/lib/libomptarget.devicertl.a"
clang_gpu=("clang-$v" "${flags[@]}" -fopenmp-targets=x86_64-pc-linux-gnu,amdgcn-amd-amdhsa
  -Xopenmp-target=amdgcn-amd-amdhsa -march=gfx90a -nogpulib "${deps[@]}" "$gpurtl")
ompcc_gpu=("$ompcc" "--clang=clang-$v" "${flags[@]}" "${deps[@]}" --target-offload=x86_64-pc-linux-gnu
  --target-offload=amdgcn -march=gfx90a --host)
gpu=0
[ "$v" = 19 ] && [ -f "$gpurtl" ] && gpu=1

oneshot() { (cd "$work" && "$@" "${files[@]/#/$src/}" -o app); }
makestyle() {
  (cd "$work" && for f in "${files[@]}"; do "$@" -c "$src/$f" -o "${f%.c}.o"; done && "$@" main.o sum.o scale.o -o app)
}
time_it() { # reps, function, command...: total seconds
  local n=$1; shift
  local t0 t1
  t0=$(date +%s.%N)
  for ((i = 0; i < n; i++)); do "$@"; done
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{printf "%.3f", $2 - $1}'
}
check() { out=$(LD_LIBRARY_PATH=/usr/lib/llvm-$v/lib "$work/app"); [ "$out" = "make project: sum=499500 scaled=14850" ] || { echo "bench-driver: wrong output: $out" >&2; exit 1; }; }

# Warm caches, and check both programs run.
oneshot "${clang_cmd[@]}"; check
oneshot "${ompcc_cmd[@]}"; check
if ((gpu)); then
  oneshot "${clang_gpu[@]}"; check
  oneshot "${ompcc_gpu[@]}"; check
fi
printf 'LLVM %s, %s builds each, %s CPUs\n' "$v" "$reps" "$(nproc)"
report() { # mode, clang seconds, ompcc seconds
  awk -v m="$1" -v c="$2" -v o="$3" -v n="$reps" \
    'BEGIN{printf "%-9s clang %.3fs/build  ompcc %.3fs/build  ratio ompcc/clang %.2f\n", m, c/n, o/n, o/c}'
}
for mode in oneshot makestyle; do
  c=$(time_it "$reps" $mode "${clang_cmd[@]}")
  o=$(time_it "$reps" $mode "${ompcc_cmd[@]}")
  report $mode "$c" "$o"
done
if ((gpu)); then
  c=$(time_it "$reps" oneshot "${clang_gpu[@]}")
  o=$(time_it "$reps" oneshot "${ompcc_gpu[@]}")
  report x86+gfx90a "$c" "$o"
fi
