#!/usr/bin/env bash
# Benchmarks the CPU device runtime on Fortran offload loops (benches/fortran/tdpd_bench.f90):
#   * device loop (`target teams distribute parallel do`, through dist/lib/libomptarget.devicertl.a)
#     with OMP_NUM_THREADS=1 and 2: speed-up (goal >= 1.6x on 2 cores);
#   * the same loop as a host `parallel do` in the same run: device/host ratio (goal <= 1.10).
# Built with flang-new-22 (flang 19 cannot compile `teams distribute parallel do`; with
# FLANG=flang-new-19 the script rewrites it to `target parallel do`). Each configuration runs
# TRIALS times (default 5) and the best time is kept, since the machine may be shared.
# Usage: scripts/bench-fortran.sh            (after `make dist`)
#        DEVICERTL=path/to/libomptarget_devicertl.a FLANG=flang-new-19 TRIALS=3 scripts/bench-fortran.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
flang=${FLANG:-flang-new-22}
trials=${TRIALS:-5}
devrtl=${DEVICERTL:-$root/dist/lib/libomptarget.devicertl.a}
[ -f "$devrtl" ] || { echo "bench-fortran: $devrtl missing: run 'make dist' first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

src=$root/benches/fortran/tdpd_bench.f90
case "$flang" in
  *19*)
    sed 's/target teams distribute parallel do/target parallel do/' "$src" >"$work/bench.f90"
    mkdir -p "$work/devrtl" && ln -s "$devrtl" "$work/devrtl/libomptarget.devicertl.a"
    link=(-L"$work/devrtl" -I"$root/.deps/include19" -L"$root/.deps/lib19")
    export LD_LIBRARY_PATH=/usr/lib/llvm-19/lib
    construct="target parallel do" ;;
  *)
    cp "$src" "$work/bench.f90"
    link=(-fopenmp-version=52 -L"$root/.deps/lib22" -Xoffload-linker-x86_64-pc-linux-gnu "$devrtl")
    construct="target teams distribute parallel do" ;;
esac
(cd "$work" && "$flang" -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -O2 bench.f90 -o bench "${link[@]}" 2>/dev/null)

# Best (smallest) device and host time per kernel over the trials, as "kernel dev host".
best() {
  for _ in $(seq "$trials"); do
    OMP_TARGET_OFFLOAD=MANDATORY OMP_NUM_THREADS=$1 "$work/bench"
  done | awk '{ line=$0; gsub(/= +/, "=", line); $0=line; k=$1; sub("device_s=","",$2); sub("host_s=","",$3); sub("check=","",$4);
                if ($4 != 0) { print "bench-fortran: wrong result in " k > "/dev/stderr"; exit 1 }
                if (!(k in d) || $2+0 < d[k]) d[k]=$2+0; if (!(k in h) || $3+0 < h[k]) h[k]=$3+0;
                if (!(k in o)) o[k]=++n }
          END { for (k in o) printf "%d %s %.6g %.6g\n", o[k], k, d[k], h[k] }' | sort -n | cut -d' ' -f2-
}

echo "device loop: $construct ($flang, best of $trials; times in seconds per loop)"
paste -d' ' <(best 1) <(best 2) | awk '
  BEGIN { printf "%-8s %10s %10s %8s | %10s %10s %10s\n", "kernel", "dev T=1", "dev T=2", "speedup", "host T=1", "host T=2", "dev/host@2" }
  { printf "%-8s %10.4g %10.4g %7.2fx | %10.4g %10.4g %10.2f\n", $1, $2, $5, $2/$5, $3, $6, $5/$6 }'
