#!/usr/bin/env bash
# MPI devices against the MPI they run on (docs/cluster.md), between the same two ranks of one
# job on this machine: an empty target region on an MPI device vs a bare MPI round trip of
# the same size (blocking, and waited for the way the runtime waits), and 64 MiB copies to,
# from and between MPI devices (rank 1 to rank 2, directly; within rank 1) vs raw MPI
# bandwidth (all ranks are on this machine, so any two ranks are alike). Needs `make dist`
# and Open MPI.
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
raw=$(sed -n 's/^64 MiB rank to rank: \([0-9.]*\) GB\/s$/\1/p' "$work/raw.txt")
pieces=$(sed -n 's/^64 MiB rank to rank in 2 MiB messages: \([0-9.]*\) GB\/s$/\1/p' "$work/raw.txt")
across=$(sed -n 's/^64 MiB device 4 to device 8: \([0-9.]*\) GB\/s$/\1/p' "$work/mpi.txt")
awk -v raw="$raw" -v pieces="$pieces" -v across="$across" 'BEGIN {
  printf "rank-to-rank omp_target_memcpy / raw MPI: %.2fx (goal >= 0.9); / raw MPI in 2 MiB messages: %.2fx\n",
    across / raw, across / pieces }'
echo "== for scale: the program's own host device 0"
LD_LIBRARY_PATH="$root/dist/lib" "$work/bench_offload" 0 "$runs"
