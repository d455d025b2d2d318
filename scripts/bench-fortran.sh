#!/usr/bin/env bash
# Benchmarks offload loops on the CPU device against the same loops on the host, in one binary
# and one run (benches/fortran/tdpd_bench.f90, benches/c/tdpd_bench.c): triad, reduction
# sum(b*c), 5-point 2-D stencil, one exp per element; device `target teams distribute parallel
# do` / host `parallel do`; 8M and 64K elements; OMP_NUM_THREADS=1 and 2; best of TRIALS runs.
# Within a run, device and host batches alternate and each side keeps its fastest batch (see the
# benchmark's header): on a shared machine a whole-run average measures the other processes.
# Builds (all through dist/bin/ompcc):
#   f22-lto      flang-new-22, device LTO with dist/lib/libomptarget.devicertl.bc (ompcc's default)
#   f22-archive  flang-new-22 with the native archive (OMPCC_DEVICE_LTO=0)
#   f19-lto      flang-new-19, device LTO with libomptarget.devicertl.llvm19.bc (merged and
#                optimised by LLVM 22's llvm-link/clang, which read LLVM 19 bitcode); flang 19
#                cannot compile `teams distribute parallel do`: its device loops are `target parallel do`
#   f19-archive  flang-new-19 with the native archive (OMPCC_DEVICE_LTO=0)
#   c22          clang-22, C (clang's device code calls libomp, not the device runtime)
# Goals (issue 14): dev/host <= 1.10 for f22-lto; speed-up 1 -> 2 threads >= 1.6x.
# Usage: scripts/bench-fortran.sh                 (after `make dist`)
#        BUILDS="f22-lto c22" SIZES="65536" TRIALS=3 scripts/bench-fortran.sh
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
trials=${TRIALS:-5}
builds=${BUILDS:-f22-lto f22-archive f19-lto f19-archive c22}
sizes=${SIZES:-8000000 65536}
ompcc=$root/dist/bin/ompcc
[ -x "$ompcc" ] && [ -f "$root/dist/lib/libomptarget.devicertl.bc" ] \
  || { echo "bench-fortran: run 'make dist' first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cp "$root/benches/fortran/tdpd_bench.f90" "$work/bench.f90"
sed 's/target teams distribute parallel do/target parallel do/' "$root/benches/fortran/tdpd_bench.f90" >"$work/bench19.f90"
target=(-fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -O2)

build() { # name -> $work/<name>
  local b=$1
  case "$b" in
    f22-lto) (cd "$work" && "$ompcc" --flang=flang-new-22 --clang=clang-22 "${target[@]}" bench.f90 -o "$b") ;;
    f22-archive) (cd "$work" && OMPCC_DEVICE_LTO=0 "$ompcc" --flang=flang-new-22 --clang=clang-22 "${target[@]}" bench.f90 -o "$b") ;;
    f19-lto|f19-archive) (cd "$work" && [ "$b" = f19-lto ] || export OMPCC_DEVICE_LTO=0
            "$ompcc" --flang=flang-new-19 --clang=clang-19 "${target[@]}" -I"$root/.deps/include19" \
            -L"$root/.deps/lib19" bench19.f90 -o "$b") ;;
    c22) (cd "$work" && "$ompcc" --clang=clang-22 "${target[@]}" "$root/benches/c/tdpd_bench.c" -o "$b" -lm) ;;
    *) echo "bench-fortran: unknown build $b" >&2; return 1 ;;
  esac 2> >(grep -v 'still incomplete' >&2)
}

# Best (smallest) device and host time per kernel over the trials, as "kernel dev host".
best() { # exe threads size
  for _ in $(seq "$trials"); do
    OMP_TARGET_OFFLOAD=MANDATORY OMP_NUM_THREADS=$2 "$1" "$3"
  done | awk '{ line=$0; gsub(/= +/, "=", line); $0=line; k=$1; sub("device_s=","",$2); sub("host_s=","",$3); sub("check=","",$4);
                if ($4 != 0) { print "bench-fortran: wrong result in " k > "/dev/stderr"; exit 1 }
                if (!(k in d) || $2+0 < d[k]) d[k]=$2+0; if (!(k in h) || $3+0 < h[k]) h[k]=$3+0;
                if (!(k in o)) o[k]=++n }
          END { for (k in o) printf "%d %s %.6g %.6g\n", o[k], k, d[k], h[k] }' | sort -n | cut -d' ' -f2-
}

echo "CPU device loop vs host loop (best of $trials; seconds per loop; dev/host = device time / host time)"
for b in $builds; do
  build "$b"
  for n in $sizes; do
    echo "== $b, n=$n"
    paste -d' ' <(best "$work/$b" 1 "$n") <(best "$work/$b" 2 "$n") | awk '
      BEGIN { printf "%-8s %10s %10s %8s | %10s %10s | %9s %9s\n", "kernel", "dev T=1", "dev T=2", "dev 1->2", "host T=1", "host T=2", "dev/host1", "dev/host2" }
      { printf "%-8s %10.4g %10.4g %7.2fx | %10.4g %10.4g | %9.2f %9.2f\n", $1, $2, $5, $2/$5, $3, $6, $2/$3, $5/$6 }'
  done
done
