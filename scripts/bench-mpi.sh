#!/usr/bin/env bash
# MPI devices against the MPI they run on (docs/cluster.md), between the same two ranks of one
# job on this machine: an empty target region on an MPI device vs a bare MPI round trip of
# the same size (blocking, and waited for the way the runtime waits), and 64 MiB copies to,
# from and between MPI devices (rank 1 to rank 2, directly; within rank 1) vs raw MPI
# bandwidth (all ranks are on this machine, so any two ranks are alike). The device ranks run
# both ways in the same run: with an offload-worker (the default) and in process
# (`offload-mpi-device --in-process`). With perf, also the CPU time and context switches of
# all the job's processes per empty target (a run of 2N launches minus a run of N). The
# copies' figures are the best of MPI_BENCH_ROUNDS rounds (3), at real-time priority with
# MPI_BENCH_RT=1. Needs `make dist` and Open MPI.
# usage: scripts/bench-mpi.sh [empty-target runs]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
runs=${1:-2000}
work="$root/target/bench-mpi"
mkdir -p "$work"
mpirun=(mpirun --allow-run-as-root --oversubscribe -x LD_LIBRARY_PATH="$root/dist/lib")
mpicc -O2 "$root/tests/programs/mpi/raw_pingpong.c" -o "$work/raw_pingpong"
clang-22 -O2 -fopenmp -fopenmp-targets=x86_64-pc-linux-gnu -L"$root/.deps/lib22" \
  "$root/tests/programs/mpi/bench_offload.c" -o "$work/bench_offload"

echo "== raw MPI between rank 0 and rank 1 ($runs round trips)"
"${mpirun[@]}" -np 2 "$work/raw_pingpong" "$runs" | tee "$work/raw.txt"
echo "== an MPI device on rank 1 (device 4); rank 1 to rank 2 (device 4 to device 8, directly); within rank 1 (device 4 to 5)"
"${mpirun[@]}" -np 1 "$work/bench_offload" 4 "$runs" 8 5 : -np 2 "$root/dist/bin/offload-mpi-device" |
  tee "$work/mpi.txt"
echo "== the same with the device ranks serving in process (offload-mpi-device --in-process)"
"${mpirun[@]}" -np 1 "$work/bench_offload" 4 "$runs" 8 5 : -np 2 "$root/dist/bin/offload-mpi-device" --in-process |
  tee "$work/mpi-in-process.txt"
value() { sed -n "s/^$1: \([0-9.]*\) $2\$/\1/p" "$3"; }
floor=$(value 'round trip (poll, then sleep)' us "$work/raw.txt")
busy=$(value 'round trip (blocking, busy-polling)' us "$work/raw.txt")
worker=$(value 'empty target' us "$work/mpi.txt")
inproc=$(value 'empty target' us "$work/mpi-in-process.txt")
awk -v floor="$floor" -v busy="$busy" -v worker="$worker" -v inproc="$inproc" 'BEGIN {
  printf "empty target / MPI round trip waited for the same way: worker %.1fx, in process %.1fx (goal <= 1.3)\n",
    worker / floor, inproc / floor
  printf "empty target / busy-polling MPI round trip: worker %.1fx, in process %.1fx\n", worker / busy, inproc / busy }'
if command -v perf >/dev/null; then
  # At least 20,000 launches between the two runs: a job's start-up and end (about a second)
  # vary by more than a few thousand empty targets cost.
  prun=$((runs > 20000 ? runs : 20000))
  echo "== per empty target, all processes of the job (perf stat: a run of $((2 * prun)) minus a run of $prun)"
  for mode in worker in-process; do
    flag=()
    [ "$mode" = in-process ] && flag=(--in-process)
    for n in "$prun" $((2 * prun)); do
      perf stat -x, -e task-clock,context-switches -o "$work/perf-$mode-$n.txt" \
        "${mpirun[@]}" -np 1 "$work/bench_offload" 4 "$n" : -np 1 "$root/dist/bin/offload-mpi-device" "${flag[@]}" \
        >/dev/null
    done
    awk -F, -v runs="$prun" -v mode="$mode" '
      $3 == "task-clock" { ms[FILENAME] = $1 } $3 == "context-switches" { cs[FILENAME] = $1 }
      END { for (f in ms) { if (f ~ /-'"$prun"'\.txt$/) { a = f } else { b = f } }
        printf "%s: %.1f us of CPU, %.1f context switches per empty target\n", mode,
          1000 * (ms[b] - ms[a]) / runs, (cs[b] - cs[a]) / runs }' \
      "$work/perf-$mode-$prun.txt" "$work/perf-$mode-$((2 * prun)).txt"
  done
fi
# Bandwidth: ROUNDS rounds, each measuring raw MPI and both modes back to back; the best of
# each over the rounds is kept, so that a burst of load on a shared machine during one
# measurement does not decide its ratio (as scripts/bench-remote.sh does).
# MPI_BENCH_RT=1 runs each job at real-time priority (root; `chrt -f 1`, no core binding), which
# stands in for a quiet machine when other work loads this one (docs/cluster.md, "Copies").
rounds=${MPI_BENCH_ROUNDS:-3}
bw=("${mpirun[@]}")
[ "${MPI_BENCH_RT:-0}" = 1 ] && bw=(chrt -f 1 "${mpirun[@]}" --bind-to none)
echo "== 64 MiB copies: the best of $rounds rounds, each raw MPI, worker and in process back to back"
rm -f "$work"/bw-*.txt
for r in $(seq "$rounds"); do
  "${bw[@]}" -np 2 "$work/raw_pingpong" 0 >"$work/bw-raw-$r.txt"
  "${bw[@]}" -np 1 "$work/bench_offload" 4 0 8 5 : -np 2 "$root/dist/bin/offload-mpi-device" \
    >"$work/bw-worker-$r.txt"
  "${bw[@]}" -np 1 "$work/bench_offload" 4 0 8 5 : -np 2 "$root/dist/bin/offload-mpi-device" --in-process \
    >"$work/bw-in-process-$r.txt"
done
# The best of one figure (GB/s) over the rounds of one kind.
best() { cat "$work"/bw-"$1"-*.txt | sed -n "s/^64 MiB $2: \([0-9.]*\) GB\/s\$/\1/p" | sort -g | tail -1; }
one=$(best raw 'rank to rank')
pieces=$(best raw 'rank to rank in 2 MiB messages')
# The baseline: raw MPI's better form (one message, or 2 MiB messages all posted at once).
raw=$(printf '%s\n%s\n' "$one" "$pieces" | sort -g | tail -1)
printf '%-12s %9s %9s %13s %11s\n' "GB/s" "to device" "from it" "rank to rank" "within rank"
printf '%-12s %9.2f %9.2f %13.2f %11s   (one message %.2f, 2 MiB messages %.2f)\n' "raw MPI" "$raw" "$raw" "$raw" "-" \
  "$one" "$pieces"
for mode in worker in-process; do
  printf '%-12s %9.2f %9.2f %13.2f %11.2f\n' "$mode" "$(best "$mode" 'to device')" "$(best "$mode" 'from device')" \
    "$(best "$mode" 'device 4 to device 8')" "$(best "$mode" 'device 4 to device 5')"
done
for mode in worker in-process; do
  awk -v raw="$raw" -v mode="$mode" -v up="$(best "$mode" 'to device')" -v down="$(best "$mode" 'from device')" \
    -v across="$(best "$mode" 'device 4 to device 8')" 'BEGIN {
    printf "%s / raw MPI: to device %.2fx, from device %.2fx, rank to rank %.2fx (goal >= 0.9)\n", mode,
      up / raw, down / raw, across / raw }'
done
echo "== for scale: the program's own host device 0"
LD_LIBRARY_PATH="$root/dist/lib" "$work/bench_offload" 0 "$runs"
