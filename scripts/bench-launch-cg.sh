#!/usr/bin/env bash
# Launch cost without the noise of a shared machine: instructions and L1 instruction-cache
# misses per launch, counted by valgrind's callgrind with its cache simulation (this
# machine's cache geometry), for the three cases of benches/runtime/target_overhead.c, on
# LLVM's runtime and ours, per clang version. Each figure is the difference between a run
# of N2 and one of N1 launches, divided by N2-N1, so start-up and image loading cancel out.
# Wall-clock launch times on a loaded 2-core VM move by ±15% from run to run; these do not.
# usage: scripts/bench-launch-cg.sh [N1] [N2]     BASE=DIR adds a column for another build
#        of ours (DIR holds its libomptarget.so.19.1/.22.1), e.g. the previous release.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n1=${1:-1000}
n2=${2:-6000}
[ "$n2" -gt "$n1" ] || { echo "bench-launch-cg: N2 must exceed N1" >&2; exit 2; }
command -v valgrind >/dev/null || { echo "bench-launch-cg: valgrind is not installed (apt-get install valgrind)" >&2; exit 1; }
work="$root/target/bench/cg"
mkdir -p "$work"
# Prints "instructions L1i-misses" per launch for one program, runtime directory and case.
per_launch() {
  local prog=$1 libdir=$2 case=$3 n s1 s2
  for n in "$n1" "$n2"; do
    LD_LIBRARY_PATH="$libdir" valgrind --tool=callgrind --cache-sim=yes \
      --callgrind-out-file="$work/out.$n" "$prog" "$n" "$case" >/dev/null 2>&1
  done
  s1=$(awk '/^summary:/{print $2, $5}' "$work/out.$n1")
  s2=$(awk '/^summary:/{print $2, $5}' "$work/out.$n2")
  awk -v a="$s1" -v b="$s2" -v d=$((n2 - n1)) 'BEGIN{split(a,x," "); split(b,y," "); printf "%.0f %.1f\n", (y[1]-x[1])/d, (y[2]-x[2])/d}'
}
for v in 19 22; do
  flags=(-L"$root/.deps/lib$v")
  [ "$v" = 19 ] && flags+=(-I"$root/.deps/include19")
  "clang-$v" -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu "${flags[@]}" \
    "$root/benches/runtime/target_overhead.c" -o "$work/overhead$v"
  echo "== clang-$v build: per launch, LLVM $v's runtime vs ours (callgrind, $n1 and $n2 launches)"
  head=$(printf '%-11s %10s %10s %7s %9s %9s' case "llvm Ir" "ours Ir" ratio "llvm I1m" "ours I1m")
  [ -z "${BASE:-}" ] || head+=$(printf ' %10s %9s' "base Ir" "base I1m")
  echo "$head"
  for c in empty tofrom_8k present_8k; do
    read -r li lm < <(per_launch "$work/overhead$v" "/usr/lib/llvm-$v/lib" "$c")
    read -r oi om < <(per_launch "$work/overhead$v" "$root/dist/lib" "$c")
    line=$(printf '%-11s %10s %10s %7.2f %9s %9s' "$c" "$li" "$oi" "$(echo "$oi / $li" | bc -l)" "$lm" "$om")
    if [ -n "${BASE:-}" ]; then
      read -r bi bm < <(per_launch "$work/overhead$v" "$BASE" "$c")
      line+=$(printf ' %10s %9s' "$bi" "$bm")
    fi
    echo "$line"
  done
done
rm -f "$work"/out.*
