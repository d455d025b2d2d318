#!/usr/bin/env bash
# Spreading `nowait` work over devices (LIBOMPTARGET_SPREAD=1, docs/cluster.md "Spreading"):
# benches/spread/stencil.c, an unmodified tiled stencil of `target nowait depend(…) map(…)`
# tasks, on 1, 2 and 3 MPI device ranks (one device each; 3 oversubscribes this 2-core
# machine) with spreading on and off, in the same run, and on the host plugin's 4 local
# devices. Two ways to give the ranks cores:
#   shared  every rank may use every core: one device rank already runs concurrent kernels
#           on all of them (its worker has a thread per kernel in flight), so more ranks on
#           the same cores cannot add much;
#   pinned  device rank r runs on core (r-1) mod ncpu, as ranks on nodes of their own would
#           have their own cores.
# Every job runs with `--bind-to none`: without it Open MPI binds each rank to a core of its own
# when the job has no more ranks than the machine has cores (the program and ONE device rank
# here), but not when it has more (two or three device ranks), so "shared, 1 rank" ran its
# kernels on one core, and "pinned, 1 rank" had its core rebound onto the program's.
# Prints the best of REPS wall times (default 3) and the ratios. Needs `make dist`, Open MPI.
# usage: scripts/bench-spread.sh [tiles] [steps] [work]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
tiles=${1:-8}
steps=${2:-10}
work=${3:-4000}
reps=${REPS:-3}
out="$root/target/bench-spread"
mkdir -p "$out"
clang-22 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -L"$root/.deps/lib22" \
  "$root/benches/spread/stencil.c" -o "$out/stencil"
device="$root/dist/bin/offload-mpi-device"
cat > "$out/pinned-device" <<PIN
#!/bin/sh
exec taskset -c \$(( (\${OMPI_COMM_WORLD_RANK:-1} - 1) % \$(nproc) )) "$device" --devices 1
PIN
chmod +x "$out/pinned-device"
args=("$tiles" "$steps" "$work")
rm -f "$out/checksum"

# best TIME of $reps runs of a command whose output is `time T s checksum C`; every run's
# checksum must be the first run's.
best() {
  local b="" sum="" line t c
  for _ in $(seq "$reps"); do
    line=$("$@" | grep '^time ')
    t=$(awk '{print $2}' <<<"$line")
    c=$(awk '{print $5}' <<<"$line")
    [ -z "$sum" ] && sum=$c
    [ "$c" = "$sum" ] || { echo "checksum changed: $c, expected $sum" >&2; exit 1; }
    b=$(awk -v a="$b" -v t="$t" 'BEGIN{print (a=="" || t<a) ? t : a}')
  done
  [ -s "$out/checksum" ] || echo "$sum" > "$out/checksum"
  [ "$sum" = "$(cat "$out/checksum")" ] || { echo "checksum $sum differs from $(cat "$out/checksum")" >&2; exit 1; }
  echo "$b"
}

mpi() { # ranks, spread (0/1), device program
  local env=(-x LD_LIBRARY_PATH="$root/dist/lib" -x OMP_DEFAULT_DEVICE=4)
  [ "$2" = 1 ] && env+=(-x LIBOMPTARGET_SPREAD=1)
  mpirun --allow-run-as-root --oversubscribe --bind-to none "${env[@]}" -np 1 "$out/stencil" "${args[@]}" : \
    -np "$1" "$3" "${@:4}"
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{printf "%.2f", a/b}'; }

echo "== stencil: $tiles tiles x $steps steps, work $work, best of $reps; $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg)"
host_off=$(best env LD_LIBRARY_PATH="$root/dist/lib" "$out/stencil" "${args[@]}")
host_on=$(best env LD_LIBRARY_PATH="$root/dist/lib" LIBOMPTARGET_SPREAD=1 "$out/stencil" "${args[@]}")
echo "host plugin, 4 local devices: spread off ${host_off} s, on ${host_on} s (off/on $(ratio "$host_off" "$host_on"))"
for mode in shared pinned; do
  if [ $mode = shared ]; then prog=("$device" --devices 1); else prog=("$out/pinned-device"); fi
  declare -A on off
  for k in 1 2 3; do
    off[$k]=$(best mpi "$k" 0 "${prog[@]}")
    on[$k]=$(best mpi "$k" 1 "${prog[@]}")
    echo "$mode, $k device rank(s): spread off ${off[$k]} s, on ${on[$k]} s (off/on $(ratio "${off[$k]}" "${on[$k]}"))"
  done
  echo "$mode: speed-up with spreading over 1 rank: 2 ranks $(ratio "${on[1]}" "${on[2]}"), 3 ranks $(ratio "${on[1]}" "${on[3]}") (goal for 2: >= 1.6)"
  unset on off
done
echo "checksum $(cat "$out/checksum") (the same in every run)"
